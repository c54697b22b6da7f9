"""An answer's cost per step does not grow with the conversation: prompt building and text decoding are bounded."""

from __future__ import annotations

from dataclasses import replace

from core.chat.answer import Answer
from core.chat.prompt import Message


class CountingTokenizer:
    """The real tokenizer, counting characters tokenized and ids decoded."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.characters = 0
        self.decoded = 0

    def __call__(self, text: str, **kwargs):
        self.characters += len(text)
        return self.tokenizer(text, **kwargs)

    def decode(self, ids, **kwargs) -> str:
        self.decoded += len(ids)
        return self.tokenizer.decode(ids, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)


def conversation(turns: int) -> list[Message]:
    messages = [Message("system", "You are terse.")]
    for i in range(turns):
        messages += [
            Message("user", f"Question {i}: what is {i} plus {i}?"),
            Message("assistant", f"{2 * i}, of course."),
        ]
    return messages + [Message("user", "Now tell me a story about the numbers.")]


def test_the_cost_of_an_answer_does_not_grow_with_the_conversation(tiny_loaded) -> None:
    costs = {}
    for turns in (200, 2000):
        counting = CountingTokenizer(tiny_loaded.tokenizer)
        answer = Answer(
            replace(tiny_loaded, tokenizer=counting), conversation(turns), lookahead=None, max_new_tokens=48
        )
        prompt_characters = counting.characters
        steps = sum(1 for _ in answer)
        costs[turns] = (prompt_characters, counting.decoded / steps, answer.dropped_messages)
    (short_prompt, short_decode, short_dropped), (long_prompt, long_decode, long_dropped) = costs[200], costs[2000]
    assert 0 < short_dropped < long_dropped  # neither chat fits the tiny model's context of 1024 tokens
    assert long_prompt <= 1.2 * short_prompt, costs  # prompt work: what fits, not the whole chat
    assert long_decode <= 1.2 * short_decode, costs  # decoding work per step: the new ids only
