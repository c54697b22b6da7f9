"""How answers decode per mode, and tune (Auto's deeper search) storing measured tokens per step."""

from __future__ import annotations

import pytest

from core.autotune.prepare import AutoTuning, ensure_calibrated
from core.autotune.store import CalibrationStore
from core.engine.plan import decoding_plan, default_lookahead
from core.engine.tune import estimate_table, tune
from core.lookahead.config import LookaheadConfig
from core.settings import LookaheadSettings


def test_plans_per_mode(tiny_loaded, app_paths) -> None:
    best = LookaheadSettings(auto=True)
    fixed = LookaheadSettings(auto=False, window=5, ngram=3, guesses=2)
    unmeasured = AutoTuning("Auto: plain (the measurement was cancelled)")
    assert decoding_plan("plain", best, tiny_loaded, unmeasured).label == "plain"
    assert decoding_plan("auto", best, tiny_loaded, unmeasured).label == "plain"  # not measured yet
    assert decoding_plan("lookahead", best, tiny_loaded, unmeasured).lookahead == default_lookahead(
        tiny_loaded.device, tiny_loaded.parameters
    )
    assert decoding_plan("lookahead", fixed, tiny_loaded, unmeasured).lookahead == fixed.fixed
    auto = ensure_calibrated(tiny_loaded, app_paths)
    plan = decoding_plan("auto", best, tiny_loaded, auto)
    assert plan.label == "auto" and plan.chooser is auto.chooser
    tried = [
        s for s in plan.chooser.settings if s is not None
    ]  # none where this machine's curve makes every setting slower
    assert plan.pool_shape == ((max(s.ngram for s in tried), max(s.guesses for s in tried)) if tried else None)
    assert decoding_plan("lookahead", best, tiny_loaded, auto).lookahead == auto.calibration.best_lookahead
    assert decoding_plan("plain", best, tiny_loaded, auto).pool_shape is None


def test_tune_measures_tokens_per_step_and_auto_predicts_from_them(tiny_loaded, app_paths) -> None:
    with pytest.raises(ValueError, match="not measured"):
        tune(tiny_loaded, AutoTuning("Auto: plain (the measurement was cancelled)"))
    auto = ensure_calibrated(tiny_loaded, app_paths)
    settings = [LookaheadConfig(0, 3, 1), LookaheadConfig(2, 3, 2)]
    calibration = tune(tiny_loaded, auto, prompts_per_suite=1, max_new_tokens=8, settings=settings)
    measured = {e.label: e for e in calibration.estimates if e.label in ("W0 N3 G1", "W2 N3 G2")}
    assert all(e.tokens_per_step >= 1.0 and e.fed_tokens >= 1.0 for e in measured.values())
    assert measured["W2 N3 G2"].fed_tokens >= 4  # x + level tokens: at least W*(N-1)
    assert auto.calibration is calibration and auto.chooser.calibration is calibration
    stored = CalibrationStore.of(app_paths, tiny_loaded).read()  # kept for the next start
    assert {e.label: e.tokens_per_step for e in stored.estimates}["W2 N3 G2"] == measured["W2 N3 G2"].tokens_per_step
    table = estimate_table(calibration.estimates)
    assert "| W2 N3 G2 |" in table and table.count("\n") == len(calibration.estimates) + 1
