"""Prompt building: the chat template, the plain fallback, the system-role fallback, and context truncation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from core.chat.prompt import (
    SYSTEM_FOLDED_NOTE,
    Message,
    Prompt,
    PromptError,
    build_prompt,
    encode,
    encode_messages,
    render_plain,
)


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
    messages = [
        Message("system", "Be kind."),
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "Bye"),
    ]
    expected = "System: Be kind.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Bye\n\nAssistant: "
    assert render_plain(messages) == expected
    assert plain_tokenizer.decode(encode_messages(plain_tokenizer, messages)) == expected


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
    assert (
        tighter.dropped_messages == 4
    )  # whole exchanges go: the kept part starts with a user message and len(tighter.ids) <= len(without_two) - 1
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


GEMMA_STYLE_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def gemma_tokenizer(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = GEMMA_STYLE_TEMPLATE
    return tok


def test_a_template_without_system_role_gets_the_system_prompt_in_the_first_user_turn(gemma_tokenizer) -> None:
    messages = [
        Message("system", "Be kind."),
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "Bye"),
    ]
    encoded = encode(gemma_tokenizer, messages)
    assert encoded.system_folded
    assert gemma_tokenizer.decode(encoded.ids) == (
        "<|im_start|>user\nBe kind.\n\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    )
    prompt = build_prompt(gemma_tokenizer, messages, budget=10_000)
    assert prompt.ids == encoded.ids and prompt.note == SYSTEM_FOLDED_NOTE
    # Without a system prompt nothing is folded and there is no note.
    assert build_prompt(gemma_tokenizer, messages[1:], budget=10_000).note == ""
    assert build_prompt(gemma_tokenizer, [Message("system", "Only this.")], budget=10_000).note == SYSTEM_FOLDED_NOTE


def test_the_fold_applies_to_the_first_kept_user_turn(gemma_tokenizer) -> None:
    messages = [Message("system", "Be kind."), *CONVERSATION[1:]]
    kept = [Message("user", "Be kind.\n\nThird question about plums?")]
    budget = len(encode_messages(gemma_tokenizer, kept))
    prompt = build_prompt(gemma_tokenizer, messages, budget)
    assert prompt.dropped_messages == 4 and prompt.ids == encode_messages(gemma_tokenizer, kept)


def test_a_template_that_refuses_the_conversation_anyway_is_a_clear_error(gemma_tokenizer) -> None:
    messages = [Message("assistant", "I speak first."), Message("user", "Hi")]
    with pytest.raises(
        PromptError, match=r"chat template refused this conversation \(Conversation roles must alternate"
    ):
        build_prompt(gemma_tokenizer, messages, budget=10_000)


class CountingTokenizer:
    """The real tokenizer, counting the characters it is asked to tokenize."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.characters = 0

    def __call__(self, text: str, **kwargs):
        self.characters += len(text)
        return self.tokenizer(text, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)


def long_conversation(turns: int) -> list[Message]:
    messages = [Message("system", "You are terse.")]
    for i in range(turns):
        messages.append(Message("user", f"Question {i}: what is {i} times {i + 3}, and why does it matter?"))
        messages.append(Message("assistant", f"It is {i * (i + 3)}; it matters for exercise number {i}."))
    return messages + [Message("user", "And the last question?")]


def _fewest_drops(tok, messages: list[Message], budget: int) -> int:
    """The specification: the fewest oldest non-system turns to drop, keeping from a user message on."""
    for dropped in range(len(messages) - 1):
        if (
            messages[1 + dropped].role == "user"
            and len(encode_messages(tok, [messages[0], *messages[1 + dropped :]])) <= budget
        ):
            return dropped
    raise AssertionError("nothing fits")


@pytest.mark.parametrize("budget", [60, 300, 900])
def test_the_cut_is_the_fewest_drops(tokenizer, gemma_tokenizer, plain_tokenizer, budget: int) -> None:
    messages = long_conversation(12)
    for tok in (tokenizer, gemma_tokenizer, plain_tokenizer):
        prompt = build_prompt(tok, messages, budget)
        assert prompt.dropped_messages == _fewest_drops(tok, messages, budget)
        assert prompt.ids == encode_messages(tok, [messages[0], *messages[1 + prompt.dropped_messages :]])


def test_prompt_work_does_not_grow_with_the_conversation(tokenizer) -> None:
    """Tokenized characters per prompt are bounded by what fits, not by the length of the chat."""
    budget = 400
    work = {}
    for turns in (25, 400):
        counting = CountingTokenizer(tokenizer)
        prompt = build_prompt(counting, long_conversation(turns), budget)
        assert prompt.dropped_messages > 0 and len(prompt.ids) <= budget
        kept = len(tokenizer.decode(prompt.ids))
        work[turns] = counting.characters
        assert counting.characters <= 6 * kept, (turns, counting.characters, kept)
    assert work[400] <= 1.5 * work[25], work
