"""Property-based: whatever is in the settings file or the history file, starting up neither raises nor loses it."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core.chat.history import HISTORY_FILE, HistoryError, HistoryStore, open_history
from core.settings import SETTINGS_FILE, Settings, SettingsStore

EXAMPLES = settings(max_examples=150, deadline=None, database=None)  # no wall-clock limit, no .hypothesis/ folder

SECTIONS = {
    "sampling": [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "max_new_tokens",
        "seed",
        "stop_strings",
    ],
    "lookahead": ["auto", "window", "ngram", "guesses"],
    "load": ["device", "dtype", "quantization", "attn_implementation"],
    "source": ["kind", "location"],
}
TOP = ["mode", "system_prompt", "theme"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["plain", "lookahead", "dark", "cpu", "auto", "default", "folder", "hub", "fp32", "4bit", ""])
)
any_json = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
settings_like = st.fixed_dictionaries(
    {},
    optional={
        **{
            name: st.dictionaries(st.sampled_from(keys), any_json, max_size=len(keys)) | any_json
            for name, keys in SECTIONS.items()
        },
        **{name: any_json for name in TOP},
    },
)
deep = st.tuples(st.integers(min_value=1, max_value=5000), st.sampled_from(["[", '{"a":', '{"sampling": '])).map(
    lambda t: t[1] * t[0]
)
settings_files = (
    settings_like.map(lambda d: json.dumps(d).encode())
    | any_json.map(lambda d: json.dumps(d).encode())
    | deep.map(str.encode)
    | st.binary(max_size=200)
)


@EXAMPLES
@given(content=settings_files)
def test_any_settings_file_loads_and_is_never_lost(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder)
        (config / SETTINGS_FILE).write_bytes(content)
        loaded = SettingsStore(config).load()
        assert isinstance(loaded.settings, Settings)
        if loaded.problem is None:
            assert (config / SETTINGS_FILE).read_bytes() == content
            SettingsStore(config).save(loaded.settings)  # what loads, saves and loads back the same
            assert SettingsStore(config).load() == loaded
        else:
            [aside] = config.glob("settings.invalid-*.json")
            assert aside.read_bytes() == content and aside.name in loaded.problem
        s = loaded.settings.sampling
        assert all(math.isfinite(v) for v in (s.temperature, s.top_p, s.min_p, s.repetition_penalty))


def _real_history() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        store = HistoryStore(Path(folder) / HISTORY_FILE)
        conv = store.create_conversation("Kept")
        for i in range(30):
            store.add_message(
                conv.id,
                "user" if i % 2 == 0 else "assistant",
                f"turn {i} " + "z" * 300,
                stats={"tokens_per_second": 1.5} if i % 2 else None,
                status="complete",
            )
        store.close()
        return (Path(folder) / HISTORY_FILE).read_bytes()


REAL_HISTORY = _real_history()


@st.composite
def damaged_histories(draw) -> bytes:
    """A real history file cut short, or with a few byte ranges overwritten."""
    data = bytearray(REAL_HISTORY[: draw(st.integers(min_value=0, max_value=len(REAL_HISTORY)))])
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if not data:
            break
        start = draw(st.integers(min_value=0, max_value=len(data) - 1))
        patch = draw(st.binary(min_size=1, max_size=64))
        data[start : start + len(patch)] = patch
    return bytes(data)


@EXAMPLES
@given(content=st.binary(max_size=5000) | damaged_histories())
def test_any_history_file_opens_and_is_never_lost(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder)
        (data / HISTORY_FILE).write_bytes(content)
        store, problem = open_history(data)
        try:
            asides = [*data.glob("history.damaged-*.sqlite3"), *data.glob("history.foreign-*.sqlite3")]
            if asides:
                [aside] = asides
                assert aside.read_bytes() == content and str(aside) in problem
            else:
                assert (data / HISTORY_FILE).exists()  # opened as it was (or kept in place, session in memory)
            try:  # a file that opened can still fail later, but only with a HistoryError the window shows
                for conv in store.conversations():
                    store.messages(conv.id)
                conv = store.create_conversation("new")
                store.add_message(conv.id, "user", "still works")
            except HistoryError:
                assert problem is None and not asides
        finally:
            store.close()
