"""How answers decode per mode, and tune (Auto's deeper search) storing measured tokens per step."""

from __future__ import annotations

import pytest

from core import tuning
from core.calibration import ensure_calibrated
from core.lookahead.config import LookaheadConfig
from core.lookahead.defaults import default_lookahead
from core.settings import LookaheadSettings


def test_plans_per_mode(tiny_loaded, app_paths) -> None:
    best = LookaheadSettings(auto=True)
    fixed = LookaheadSettings(auto=False, window=5, ngram=3, guesses=2)
    assert tuning.decoding_plan("plain", best, tiny_loaded).label == "plain"
    assert tuning.decoding_plan("auto", best, tiny_loaded).label == "plain"  # not measured yet
    assert tuning.decoding_plan("lookahead", best, tiny_loaded).lookahead == default_lookahead(tiny_loaded.device, tiny_loaded.parameters)
    assert tuning.decoding_plan("lookahead", fixed, tiny_loaded).lookahead == fixed.fixed
    calibration = ensure_calibrated(tiny_loaded, app_paths)
    auto = tuning.decoding_plan("auto", best, tiny_loaded)
    assert auto.label == "auto" and auto.chooser is tiny_loaded.chooser
    tried = [s for s in auto.chooser.settings if s is not None]  # none where this machine's curve makes every setting slower
    assert auto.pool_shape == ((max(s.ngram for s in tried), max(s.guesses for s in tried)) if tried else None)
    assert tuning.decoding_plan("lookahead", best, tiny_loaded).lookahead == calibration.best_lookahead
    assert tuning.decoding_plan("plain", best, tiny_loaded).pool_shape is None


def test_tune_measures_tokens_per_step_and_auto_predicts_from_them(tiny_loaded, app_paths) -> None:
    with pytest.raises(ValueError, match="not measured"):
        tuning.tune(tiny_loaded, app_paths)
    ensure_calibrated(tiny_loaded, app_paths)
    settings = [LookaheadConfig(0, 3, 1), LookaheadConfig(2, 3, 2)]
    calibration = tuning.tune(tiny_loaded, app_paths, prompts_per_suite=1, max_new_tokens=8, settings=settings)
    measured = {e.label: e for e in calibration.estimates if e.label in ("W0 N3 G1", "W2 N3 G2")}
    assert all(e.tokens_per_step >= 1.0 and e.fed_tokens >= 1.0 for e in measured.values())
    assert measured["W2 N3 G2"].fed_tokens >= 4  # x + level tokens: at least W*(N-1)
    assert tiny_loaded.calibration is calibration
    table = tuning.estimate_table(calibration.estimates)
    assert "| W2 N3 G2 |" in table and table.count("\n") == len(calibration.estimates) + 1
