"""Prompt building: the chat template, the plain fallback, and context truncation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from core.chat.prompt import FALLBACK_TEMPLATE_NOTE, Message, Prompt, build_prompt, encode_messages, render_plain


@pytest.fixture(scope="module")
def tokenizer(default_model_folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_folder)


@pytest.fixture(scope="module")
def plain_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = None
    return tok


CONVERSATION = [
    Message("system", "You are terse."),
    Message("user", "First question about apples?"),
    Message("assistant", "Apples are red."),
    Message("user", "Second question about pears?"),
    Message("assistant", "Pears are green."),
    Message("user", "Third question about plums?"),
]


def test_chat_template_is_used(tokenizer) -> None:
    ids = encode_messages(tokenizer, [Message("system", "Be kind."), Message("user", "Hi")])
    assert tokenizer.decode(ids) == (
        "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # special tokens, not spelled out


def test_plain_fallback(plain_tokenizer) -> None:
    messages = [Message("system", "Be kind."), Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", "Bye")]
    expected = "System: Be kind.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Bye\n\nAssistant: "
    assert render_plain(messages) == expected
    assert plain_tokenizer.decode(encode_messages(plain_tokenizer, messages)) == expected
    assert "System: ..." in FALLBACK_TEMPLATE_NOTE and "Assistant: " in FALLBACK_TEMPLATE_NOTE


def test_render_plain_other_roles() -> None:
    assert render_plain([Message("tool", "42")]) == "Tool: 42\n\nAssistant: "
    assert render_plain([]) == "Assistant: "


def test_everything_fits(tokenizer) -> None:
    prompt = build_prompt(tokenizer, CONVERSATION, budget=10_000)
    assert prompt == Prompt(encode_messages(tokenizer, CONVERSATION), 0)


@pytest.mark.parametrize("tok_name", ["tokenizer", "plain_tokenizer"])
def test_oldest_turns_dropped_system_kept(tok_name: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tok_name)
    full = len(encode_messages(tok, CONVERSATION))
    without_two = encode_messages(tok, [CONVERSATION[0], *CONVERSATION[3:]])
    prompt = build_prompt(tok, CONVERSATION, budget=len(without_two))
    assert prompt.dropped_messages == 2 and prompt.ids == without_two
    assert len(prompt.ids) < full
    text = tok.decode(prompt.ids)
    assert "You are terse." in text and "apples" not in text and "Apples" not in text
    assert "pears" in text and "plums" in text
    # one token less than that: the next oldest turn goes too
    tighter = build_prompt(tok, CONVERSATION, budget=len(without_two) - 1)
    assert tighter.dropped_messages >= 3 and len(tighter.ids) <= len(without_two) - 1
    assert "You are terse." in tok.decode(tighter.ids)


def test_only_last_message_kept(tokenizer) -> None:
    last_only = encode_messages(tokenizer, [CONVERSATION[0], CONVERSATION[-1]])
    prompt = build_prompt(tokenizer, CONVERSATION, budget=len(last_only))
    assert prompt.dropped_messages == len(CONVERSATION) - 2 and prompt.ids == last_only


def test_without_system_prompt(tokenizer) -> None:
    messages = CONVERSATION[1:]
    last_only = encode_messages(tokenizer, messages[-1:])
    prompt = build_prompt(tokenizer, messages, budget=len(last_only))
    assert prompt.dropped_messages == len(messages) - 1 and prompt.ids == last_only


def test_too_long_message(tokenizer) -> None:
    messages = [Message("system", "You are terse."), Message("user", "word " * 500)]
    with pytest.raises(ValueError, match=r"too long for the model's context \(100 tokens are left") as err:
        build_prompt(tokenizer, messages, budget=100)
    assert "Shorten the message" in str(err.value)
