"""Settings: round trip, defaults, a damaged file reported and kept aside, validation messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.models.options import LoadOptions, ModelSource
from core.settings import (
    MAX_SYSTEM_PROMPT,
    SETTINGS_FILE,
    LookaheadSettings,
    SamplingSettings,
    Settings,
    SettingsStore,
)


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    loaded = SettingsStore(tmp_path).load()
    assert loaded.settings == Settings() and loaded.problem is None
    assert loaded.settings.source == ModelSource() and loaded.settings.mode == "auto"
    assert loaded.settings.sampling.greedy


def test_round_trip(tmp_path: Path) -> None:
    settings = Settings(
        source=ModelSource("gguf", "/models/x.gguf"),
        load=LoadOptions(device="cpu", dtype="bf16", quantization="none", attn_implementation="eager"),
        sampling=SamplingSettings(
            temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1, max_new_tokens=64, seed=3
        ),
        mode="plain",
        lookahead=LookaheadSettings(auto=False, window=4, ngram=3, guesses=2),
        system_prompt="Réponds en français. 日本語も",
        theme="dark",
    )
    store = SettingsStore(tmp_path / "config")
    store.save(settings)
    loaded = SettingsStore(tmp_path / "config").load()
    assert loaded.problem is None
    assert loaded.settings == settings
    assert loaded.settings.lookahead.fixed.label == "W4 N3 G2"
    assert not loaded.settings.sampling.greedy
    assert [p.name for p in (tmp_path / "config").iterdir()] == [SETTINGS_FILE]  # no temp files left


def test_unknown_keys_ignored_and_missing_keys_defaulted(tmp_path: Path) -> None:
    (tmp_path / SETTINGS_FILE).write_text(
        json.dumps({"theme": "light", "future_option": 1, "sampling": {"top_k": 5, "new": 2}})
    )
    loaded = SettingsStore(tmp_path).load()
    assert loaded.problem is None
    assert loaded.settings == Settings(theme="light", sampling=SamplingSettings(top_k=5))


@pytest.mark.parametrize(
    "content",
    [
        "{ this is not json",
        "[1, 2, 3]",
        '{"mode": "turbo"}',
        '{"sampling": {"temperature": 9}}',
        '{"sampling": {"temperature": "hot"}}',
        '{"sampling": "fast"}',
        '{"load": {"device": "tpu"}}',
        '{"source": {"kind": "folder"}}',
        '{"source": {"kind": "hub", "location": 5}}',
        '{"lookahead": {"window": -1}}',
        '{"lookahead": {"window": 0, "guesses": 0}}',
        '{"system_prompt": 42}',
        '{"theme": ["dark"]}',
        b"\xff\xfe\x00garbage",
        # issue 15: each of these passed or crashed before
        "[" * 1000,  # RecursionError at every start
        '{"sampling": ' * 2000 + "1" + "}" * 2000,
        '{"sampling": {"top_k": 2.5}}',
        '{"sampling": {"top_k": 100000000}}',
        '{"sampling": {"seed": "abc"}}',
        '{"sampling": {"seed": 1180591620717411303424}}',  # 2**70
        '{"sampling": {"seed": -1}}',
        '{"sampling": {"max_new_tokens": true}}',
        '{"sampling": {"max_new_tokens": 64.0}}',
        '{"sampling": {"temperature": NaN}}',
        '{"sampling": {"temperature": 1e400}}',
        '{"sampling": {"repetition_penalty": false}}',
        '{"sampling": {"max_new_tokens": ' + "9" * 5000 + "}}",  # past int()'s digit limit
        '{"sampling": {"stop_strings": "###"}}',
        '{"lookahead": {"auto": 1}}',
        '{"lookahead": {"window": 2.5}}',
        '{"lookahead": {"window": "7"}}',
        '{"lookahead": {"ngram": 1180591620717411303424}}',
        '{"load": {"device": ["cpu"]}}',
        '{"mode": null}',
    ],
)
def test_corrupt_file_gives_defaults_problem_and_backup(tmp_path: Path, content: str | bytes) -> None:
    path = tmp_path / SETTINGS_FILE
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    loaded = SettingsStore(tmp_path).load()
    assert loaded.settings == Settings()
    assert loaded.problem is not None
    [backup] = tmp_path.glob("settings.invalid-*.json")
    assert "Default settings are in effect" in loaded.problem and f"kept as {backup.name}" in loaded.problem
    assert backup.read_bytes() == (content if isinstance(content, bytes) else content.encode())
    assert not path.exists()
    # the next start is clean: no file, no problem
    assert SettingsStore(tmp_path).load().problem is None


def test_a_second_bad_file_never_overwrites_the_first_one_set_aside(tmp_path: Path) -> None:
    for content in ("{ first", "{ second", "{ third"):
        (tmp_path / SETTINGS_FILE).write_text(content)
        assert SettingsStore(tmp_path).load().problem
    assert sorted(p.read_text() for p in tmp_path.glob("settings.invalid-*.json")) == ["{ first", "{ second", "{ third"]


def test_numbers_load_as_their_field_types(tmp_path: Path) -> None:
    (tmp_path / SETTINGS_FILE).write_text('{"sampling": {"temperature": 1, "top_p": 1, "seed": 7}}')
    sampling = SettingsStore(tmp_path).load().settings.sampling
    assert type(sampling.temperature) is float and type(sampling.top_p) is float and sampling.seed == 7


def test_problem_message_names_the_bad_value(tmp_path: Path) -> None:
    (tmp_path / SETTINGS_FILE).write_text('{"sampling": {"top_p": 0}}')
    assert "(sampling: top_p must be in (0, 1] (got 0.0))" in SettingsStore(tmp_path).load().problem


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "temperature must be between 0 and 5"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"top_k": -1}, "top_k must be 0 (off) to 1000"),
        ({"top_k": 2.5}, "top_k must be a whole number (got 2.5)"),
        ({"seed": "abc"}, "seed must be a whole number (got 'abc')"),
        ({"seed": 2**70}, "seed must be empty (random) or 0 to 2147483647"),
        ({"max_new_tokens": True}, "max_new_tokens must be a whole number (got True)"),
        ({"temperature": float("nan")}, "temperature must be a number (got nan)"),
        ({"min_p": 1.0}, "min_p must be in [0, 1)"),
        ({"repetition_penalty": 4}, "repetition_penalty must be between 0.5 and 3"),
        ({"max_new_tokens": 0}, "max_new_tokens must be between 1 and 32768"),
    ],
)
def test_sampling_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SamplingSettings(**kwargs)
    assert str(err.value).startswith(message)


def test_other_validation() -> None:
    with pytest.raises(ValueError, match="mode must be one of auto, plain, lookahead"):
        Settings(mode="fast")
    with pytest.raises(ValueError, match="theme must be one of system, light, dark"):
        Settings(theme="neon")
    with pytest.raises(ValueError, match="window W must be 0 \\(verification only\\) or more"):
        LookaheadSettings(window=-1)
    with pytest.raises(ValueError, match="needs at least one guess"):
        LookaheadSettings(window=0, guesses=0)
    with pytest.raises(ValueError, match="does not hold a JSON object"):
        Settings.from_json([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'sampling' must be an object"):
        Settings.from_json({"sampling": 3})


def test_a_100_mb_system_prompt_is_refused_at_load(tmp_path: Path) -> None:
    """Issue 28: accepted silently, it kept every answer on "generating…" for minutes (tokenizing it)."""
    content = json.dumps({"theme": "dark", "system_prompt": "Be brief. " * 10_000_000})  # 100 MB
    (tmp_path / SETTINGS_FILE).write_text(content)
    loaded = SettingsStore(tmp_path).load()
    [backup] = tmp_path.glob("settings.invalid-*.json")
    assert loaded.settings == Settings() and backup.read_text() == content
    assert loaded.problem.startswith(
        "The settings file could not be used (the system prompt has 100,000,000 characters; "
        f"at most {MAX_SYSTEM_PROMPT:,} fit the context of any model this app runs: shorten it)."
    )


def test_the_longest_system_prompt_is_accepted_and_one_more_character_refused() -> None:
    assert len(Settings(system_prompt="x" * MAX_SYSTEM_PROMPT).system_prompt) == MAX_SYSTEM_PROMPT
    with pytest.raises(ValueError, match=f"the system prompt has {MAX_SYSTEM_PROMPT + 1:,} characters"):
        Settings(system_prompt="x" * (MAX_SYSTEM_PROMPT + 1))  # the settings dialog shows this message too


def test_save_replaces_atomically(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path)
    store.save(Settings(theme="dark"))
    store.save(Settings(theme="light"))
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["theme"] == "light"
    assert sorted(p.name for p in tmp_path.iterdir()) == [SETTINGS_FILE]


def test_stop_strings_round_trip_and_validation(tmp_path) -> None:
    from core.settings import SamplingSettings, Settings, SettingsStore

    store = SettingsStore(tmp_path)
    settings = Settings(sampling=SamplingSettings(stop_strings=("\nUser:", "###", "")))
    store.save(settings)
    loaded = store.load()
    assert loaded.problem is None
    assert loaded.settings.sampling.stop_strings == ("\nUser:", "###")
    with pytest.raises(ValueError, match="stop_strings"):
        SamplingSettings(stop_strings=("ok", 3))  # type: ignore[arg-type]


def test_server_settings_round_trip_and_validation(tmp_path: Path) -> None:
    from core.settings import ServerSettings

    assert Settings().server == ServerSettings(enabled=False, port=8765, api_key="", allow_network=False)
    store = SettingsStore(tmp_path)
    store.save(Settings(server=ServerSettings(enabled=True, port=9000, api_key="k")))
    assert store.load().settings.server == ServerSettings(enabled=True, port=9000, api_key="k")
    for bad in ({"port": 0}, {"port": 70000}, {"enabled": "yes"}, {"max_tokens": 0}, {"api_key": 5}):
        with pytest.raises(ValueError):
            ServerSettings(**bad)


def test_a_temperature_too_low_to_sample_with_is_greedy() -> None:
    # 1e-156 came through the server's API: logits divided by it overflow, and sampling failed with a NaN error
    assert SamplingSettings(temperature=1e-156).greedy and SamplingSettings(temperature=0.0).greedy
    assert not SamplingSettings(temperature=0.01).greedy
