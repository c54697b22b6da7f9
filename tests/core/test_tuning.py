"""Auto-tuning: step-cost curve, acceptance per setting, the stored profile that 'Auto' uses."""

from __future__ import annotations

import pytest

from core import tuning
from core.lookahead.defaults import default_lookahead
from core.settings import LookaheadSettings


def test_interpolate_between_and_beyond_measured_sizes() -> None:
    sizes, seconds = [1, 2, 4], [1.0, 2.0, 3.0]
    assert tuning.interpolate(sizes, seconds, 1) == 1.0
    assert tuning.interpolate(sizes, seconds, 3) == pytest.approx(2.5)
    assert tuning.interpolate(sizes, seconds, 6) == pytest.approx(4.0)


def test_step_cost_is_measured_for_every_size(tiny_loaded) -> None:
    seconds = tuning.measure_step_cost(tiny_loaded, sizes=(1, 8, 32), context=32, repeats=2)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)


def test_tune_stores_a_profile_that_auto_uses(tiny_loaded, app_paths, monkeypatch) -> None:
    monkeypatch.setattr(tuning, "CPU_GRID", [(2, 3, 2), (3, 4, 3)])
    monkeypatch.setattr(tuning, "STEP_SIZES", (1, 4, 16))
    auto = LookaheadSettings(auto=True)
    assert tuning.lookahead_for(auto, tiny_loaded, app_paths) == default_lookahead(tiny_loaded.device, tiny_loaded.parameters)
    profile = tuning.tune(tiny_loaded, app_paths, prompts_per_suite=1, max_new_tokens=8)
    assert tuning.profile_path(app_paths, tiny_loaded).is_file()
    assert {(c.window, c.ngram, c.guesses) for c in profile.candidates} == {(2, 3, 2), (3, 4, 3)}
    assert profile.best == max(profile.candidates, key=lambda c: c.expected_speedup)
    assert tuning.lookahead_for(auto, tiny_loaded, app_paths) == profile.best.config
    fixed = LookaheadSettings(auto=False, window=5, ngram=3, guesses=2)
    assert tuning.lookahead_for(fixed, tiny_loaded, app_paths) == fixed.fixed


def test_unreadable_profile_falls_back_to_defaults(tiny_loaded, app_paths) -> None:
    path = tuning.profile_path(app_paths, tiny_loaded)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    config = tuning.lookahead_for(LookaheadSettings(auto=True), tiny_loaded, app_paths)
    assert config == default_lookahead(tiny_loaded.device, tiny_loaded.parameters)
