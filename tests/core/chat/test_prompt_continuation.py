"""Continue: a conversation that ends with the assistant's cut-off answer is continued, not answered anew."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from core.chat.answer import Answer
from core.chat.prompt import Message, encode_messages, render_plain

QUESTION = [Message("system", "You are a helpful assistant."), Message("user", "List the planets of the solar system.")]


@pytest.fixture(scope="module")
def tokenizer(default_model_folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_folder)


def test_the_prompt_ends_with_the_partial_answer_not_with_a_new_turn(tokenizer) -> None:
    ids = encode_messages(tokenizer, [*QUESTION, Message("assistant", "Mercury, Venus,")])
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\nMercury, Venus,")
    assert ids[: len(encode_messages(tokenizer, QUESTION))] == encode_messages(tokenizer, QUESTION)


def test_the_plain_template_continues_too(tokenizer) -> None:
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    ids = encode_messages(plain, [*QUESTION, Message("assistant", "Mercury, Venus,")])
    assert plain.decode(ids, skip_special_tokens=True) == render_plain(QUESTION) + "Mercury, Venus,"


def test_cut_then_continued_is_the_answer_generated_in_one_go(default_loaded) -> None:
    whole = Answer(default_loaded, list(QUESTION), lookahead=None, max_new_tokens=24)
    whole_text = "".join(d.text for d in whole)
    cut = Answer(default_loaded, list(QUESTION), lookahead=None, max_new_tokens=12)
    cut_text = "".join(d.text for d in cut)
    assert cut.finish_reason == "length" and whole_text.startswith(cut_text)
    more = Answer(default_loaded, [*QUESTION, Message("assistant", cut_text)], lookahead=None, max_new_tokens=12)
    assert cut_text + "".join(d.text for d in more) == whole_text
