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


GOOD = [{"name": "Mine", "sampling": {"temperature": 0.5}}, {"name": "Code", "sampling": {"top_k": 20}}]


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"name": "Precise", "sampling": {}}, "“Precise” (“Precise” is a built-in preset; choose another name)"),
        ({"name": "Hot", "sampling": {"temperature": 9}}, "“Hot” (sampling: temperature must be between 0 and 5"),
        ({"name": "mine", "sampling": {}}, "“mine” (two presets are named “mine”)"),
        ({"name": 3, "sampling": {}}, "preset 2 (A preset needs a name)"),
        ("Precise", "preset 2 (it is not an object)"),
    ],
)
def test_one_bad_preset_is_left_out_and_the_others_load(tmp_path: Path, bad: object, named: str) -> None:
    """Issue 28: one invalid entry (a user preset named "Precise") set the whole file aside."""
    content = json.dumps({"presets": [GOOD[0], bad, GOOD[1]]})
    (tmp_path / PRESETS_FILE).write_text(content, encoding="utf-8")
    loaded = PresetStore(tmp_path).load()
    assert [p.name for p in loaded.user] == ["Mine", "Code"]
    assert loaded.user[0].sampling == SamplingSettings(temperature=0.5)
    [aside] = tmp_path.glob("presets.invalid-*.json")
    assert aside.read_text(encoding="utf-8") == content  # nothing lost: the file as it was, bad entry and all
    assert loaded.problem.startswith(f"Part of the sampling presets file could not be used: {named}")
    assert loaded.problem.endswith(
        f"was left out; the other presets loaded. The file as it was is kept as {aside.name}."
    )
    again = PresetStore(tmp_path).load()  # the file now holds the presets that loaded: the next start is clean
    assert again.user == loaded.user and again.problem is None


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    data = {"presets": [{"name": "Mine", "sampling": {"temperature": 0.5, "future_knob": 1}, "note": "x"}], "v": 2}
    (tmp_path / PRESETS_FILE).write_text(json.dumps(data), encoding="utf-8")
    [preset] = PresetStore(tmp_path).load().user
    assert preset.name == "Mine" and preset.sampling == SamplingSettings(temperature=0.5)


def test_when_no_preset_can_be_used_each_is_named(tmp_path: Path) -> None:
    content = '{"presets": [{"name": "Balanced", "sampling": {}}, {"name": "x", "sampling": {"top_p": 7}}]}'
    (tmp_path / PRESETS_FILE).write_text(content, encoding="utf-8")
    loaded = PresetStore(tmp_path).load()
    [aside] = tmp_path.glob("presets.invalid-*.json")
    assert loaded.user == () and aside.read_text(encoding="utf-8") == content
    assert loaded.problem == (
        "Part of the sampling presets file could not be used: “Balanced” (“Balanced” is a built-in preset; choose "
        "another name); “x” (sampling: top_p must be in (0, 1] (got 7.0)) were left out. "
        f"The file as it was is kept as {aside.name}."
    )
