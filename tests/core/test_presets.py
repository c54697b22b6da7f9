"""Sampling presets: built-in ones, saving and replacing the user's, and a damaged file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.presets import BUILTIN, PRESETS_FILE, PresetStore, matching, saved
from core.settings import SamplingSettings


def test_builtin_presets_cover_greedy_to_creative() -> None:
    assert [p.name for p in BUILTIN] == ["Precise", "Balanced", "Creative"]
    assert BUILTIN[0].sampling.greedy and not BUILTIN[2].sampling.greedy
    assert BUILTIN[2].sampling.temperature > BUILTIN[1].sampling.temperature
    assert matching(BUILTIN, BUILTIN[1].sampling) is BUILTIN[1]
    assert matching(BUILTIN, SamplingSettings(temperature=0.3)) is None


def test_user_presets_save_replace_and_load_back(tmp_path: Path) -> None:
    store = PresetStore(tmp_path)
    assert store.load().user == () and store.load().problem is None
    mine = SamplingSettings(temperature=0.4, top_k=20, max_new_tokens=64, seed=7, stop_strings=("END",))
    user = saved((), "  Code  ", mine)
    user = saved(user, "Story", SamplingSettings(temperature=1.2))
    user = saved(user, "code", SamplingSettings(temperature=0.2))  # same name, any case: replaced in place
    assert [(p.name, p.sampling.temperature) for p in user] == [("code", 0.2), ("Story", 1.2)]
    store.save(user)
    assert not list(tmp_path.glob(".presets.json-*"))  # written through a temp file that was renamed
    assert store.load().user == user
    assert store.load().user[0].builtin is False


@pytest.mark.parametrize("name", ["", "   ", "balanced", "x" * 61])
def test_a_preset_needs_a_free_name(name: str) -> None:
    with pytest.raises(ValueError):
        saved((), name, SamplingSettings())


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"presets": {}}',
        '{"presets": [{"name": "Hot", "sampling": {"temperature": 9}}]}',
        '{"presets": [{"name": "Precise", "sampling": {}}]}',
        '{"presets": [{"name": "a", "sampling": {}}, {"name": "A", "sampling": {}}]}',
        '{"presets": [{"name": 3, "sampling": {}}]}',
        '{"presets": [' * 5000,
    ],
)
def test_a_damaged_presets_file_is_set_aside_and_never_fatal(tmp_path: Path, content: str) -> None:
    (tmp_path / PRESETS_FILE).write_text(content, encoding="utf-8")
    loaded = PresetStore(tmp_path).load()
    assert loaded.user == ()
    [aside] = tmp_path.glob("presets.invalid-*.json")
    assert aside.read_text(encoding="utf-8") == content and aside.name in loaded.problem
    assert "built-in presets are available" in loaded.problem
    assert not (tmp_path / PRESETS_FILE).exists()


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    data = {"presets": [{"name": "Mine", "sampling": {"temperature": 0.5, "future_knob": 1}, "note": "x"}], "v": 2}
    (tmp_path / PRESETS_FILE).write_text(json.dumps(data), encoding="utf-8")
    [preset] = PresetStore(tmp_path).load().user
    assert preset.name == "Mine" and preset.sampling == SamplingSettings(temperature=0.5)
