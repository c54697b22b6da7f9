"""TextStream: clean UTF-8 deltas, stop strings never shown in part, flush."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from core.chat.textstream import TextStream


@pytest.fixture(scope="module")
def tok(default_model_folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_folder)


def ids_of(tok, *pieces: str) -> list[int]:
    """Ids whose decoding is exactly the concatenated pieces (each piece encoded on its own)."""
    return [i for p in pieces for i in tok(p, add_special_tokens=False)["input_ids"]]


def run(stream: TextStream, ids: list[int], sizes: list[int]) -> list[str]:
    """Push ids in chunks of the given sizes (the last chunk takes the rest), then flush."""
    deltas, at = [], 0
    for size in sizes:
        deltas.append(stream.push(ids[at : at + size]))
        at += size
    if at < len(ids):
        deltas.append(stream.push(ids[at:]))
    deltas.append(stream.flush())
    return deltas


def test_multibyte_characters_split_across_tokens(tok) -> None:
    text = "Rain 🌧️ falls 雨が降る 🦙🦙"
    ids = ids_of(tok, text)
    stream = TextStream(tok)
    deltas = [stream.push([i]) for i in ids]
    assert all("\ufffd" not in d for d in deltas), deltas
    assert "".join(deltas) == text and stream.text == text
    assert "" in deltas  # some tokens held only part of a character
    assert stream.flush() == "" and not stream.stopped


def test_stop_string_across_tokens_and_pushes(tok) -> None:
    ids = ids_of(tok, "Sure, here it is.", "\n", "User", ":", " more text")
    stream = TextStream(tok, stop_strings=["\nUser:"])
    shown = ""
    for i in ids:
        shown += stream.push([i])
        assert "\n" not in shown  # the start of the stop string is never shown
    assert shown == "Sure, here it is."
    assert stream.stopped and stream.text == "Sure, here it is."
    assert stream.push(ids_of(tok, "after")) == "" and stream.flush() == ""


def test_held_back_text_is_released_when_the_stop_string_does_not_come(tok) -> None:
    stream = TextStream(tok, stop_strings=["\nUser:"])
    assert stream.push(ids_of(tok, "Line one")) == "Line one"
    assert stream.push(ids_of(tok, "\n")) == ""  # could be the start of "\nUser:"
    assert stream.push(ids_of(tok, "Us")) == ""
    assert stream.push(ids_of(tok, "eful")) == "\nUseful"  # it was not
    assert stream.push(ids_of(tok, "\nUs")) == ""
    assert stream.flush() == "\nUs"  # at the end, nothing is held back any more
    assert stream.text == "Line one\nUseful\nUs" and not stream.stopped


def test_stop_string_at_the_very_start(tok) -> None:
    stream = TextStream(tok, stop_strings=["END"])
    assert stream.push(ids_of(tok, "EN")) == ""
    assert stream.push(ids_of(tok, "D and more")) == ""
    assert stream.stopped and stream.text == ""


def test_special_tokens_are_not_shown(tok) -> None:
    stream = TextStream(tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert stream.push([*ids_of(tok, "Done."), eos]) == "Done."


def _expected(text: str, stops: list[str]) -> str:
    cuts = [text.find(s) for s in stops if s in text]
    return text[: min(cuts)] if cuts else text


@pytest.mark.parametrize("seed", range(6))
def test_random_chunking_never_shows_a_stop_in_part(tok, seed: int) -> None:
    rng = random.Random(seed)
    words = ["rain", " falls", "🌧️", " 雨", "\n", "User", ":", "END", "EN", "🦙", "x", " ", "Us", "er", "\nU"]
    stops = [["\nUser:"], ["END", "🦙x"], ["\nUser:", "er:", "🦙🦙"], []][seed % 4]
    pieces = [rng.choice(words) for _ in range(40)]
    text = "".join(pieces)
    ids = ids_of(tok, *pieces)
    sizes = [rng.randint(1, 4) for _ in range(len(ids))]
    stream = TextStream(tok, stop_strings=stops)
    final = _expected(text, stops)
    shown = ""
    for delta in run(stream, ids, sizes):
        shown += delta
        assert final.startswith(shown), (shown, final)  # nothing shown is ever withdrawn
        assert "\ufffd" not in delta
    assert shown == final == stream.text
    assert stream.stopped == (final != text)


class CountingTokenizer:
    """The real tokenizer, counting the ids it is asked to decode per call."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.decoded: list[int] = []

    def decode(self, ids, **kwargs) -> str:
        self.decoded.append(len(ids))
        return self.tokenizer.decode(ids, **kwargs)


def test_decoding_work_per_step_does_not_grow_with_the_answer(tok) -> None:
    text = "".join(f"Step {i}: rain 🌧️ falls, 雨が降る, and the llama 🦙 waits.\n" for i in range(150))
    ids = ids_of(tok, text)
    counting = CountingTokenizer(tok)
    stream = TextStream(counting, stop_strings=["\nUser:"])
    per_push = []
    shown = ""
    for i in ids:
        before = sum(counting.decoded)
        shown += stream.push([i])
        per_push.append(sum(counting.decoded) - before)
    shown += stream.flush()
    assert shown == text == stream.text
    assert len(ids) > 2000
    assert max(per_push) <= 16  # a few ids of context, whatever the answer's length
    assert max(per_push[-100:]) <= max(per_push[:100])


def test_an_answer_cut_inside_a_character_never_ends_in_a_replacement_char(tok) -> None:
    text = "Llamas 🦙"
    ids = ids_of(tok, text)
    whole = len(ids_of(tok, "Llamas "))
    assert len(ids) - whole >= 2  # the emoji takes several byte tokens
    for cut in range(whole + 1, len(ids)):  # the token limit falls inside the emoji
        stream = TextStream(tok)
        shown = "".join(stream.push([i]) for i in ids[:cut]) + stream.flush()
        assert shown == stream.text == "Llamas "
        assert "\ufffd" not in shown
