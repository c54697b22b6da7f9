"""One chat answer: prompt within the context, decoding, and text deltas as they become final."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from core.chat.prompt import Message, build_prompt
from core.lookahead import Decoding, LookaheadConfig, NGramPool
from core.lookahead.stats import DecodeStats
from core.models.loader import LoadedModel
from core.progress import CancelToken
from core.textstream import TextStream


@dataclass(frozen=True)
class AnswerDelta:
    """Text that became final in one decoding step, with the running statistics."""

    text: str
    step_tokens: int
    stats: DecodeStats


class Answer:
    """Generates the assistant's reply to ``messages``; iterate for :class:`AnswerDelta`.

    After iteration, :attr:`text`, :attr:`finish_reason` and :attr:`dropped_messages` tell
    what happened.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        messages: list[Message],
        *,
        lookahead: LookaheadConfig | None,
        max_new_tokens: int,
        stop_strings: tuple[str, ...] = (),
        pool: NGramPool | None = None,
        cancel: CancelToken | None = None,
    ) -> None:
        budget = loaded.context_length - max_new_tokens
        if budget < 16:
            raise ValueError(
                f"max new tokens ({max_new_tokens}) leaves no room for the prompt in this model's "
                f"context of {loaded.context_length} tokens. Lower 'max new tokens'."
            )
        prompt = build_prompt(loaded.tokenizer, messages, budget)
        self.dropped_messages = prompt.dropped_messages
        self.prompt_ids = prompt.ids
        self._stream = TextStream(loaded.tokenizer, stop_strings)
        self._decoding = Decoding(
            loaded.model,
            prompt.ids,
            lookahead=lookahead,
            max_new_tokens=max_new_tokens,
            eos_token_ids=eos_token_ids(loaded),
            pool=pool,
            cancel=cancel,
        )
        self.finish_reason: str | None = None

    @property
    def stats(self) -> DecodeStats:
        return self._decoding.stats

    @property
    def text(self) -> str:
        return self._stream.text

    @property
    def token_ids(self) -> list[int]:
        return list(self._decoding.tokens)

    def __iter__(self) -> Iterator[AnswerDelta]:
        for step in self._decoding:
            text = self._stream.push(step.tokens)
            yield AnswerDelta(text, len(step.tokens), self._decoding.stats)
            if self._stream.stopped:
                self.finish_reason = "stop"
                return
        self.finish_reason = self._decoding.finish_reason
        tail = self._stream.flush()
        if tail:
            yield AnswerDelta(tail, 0, self._decoding.stats)


def eos_token_ids(loaded: LoadedModel) -> list[int]:
    """Every token that ends an answer: the tokenizer's EOS and the generation config's."""
    ids: set[int] = set()
    if loaded.tokenizer.eos_token_id is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    configured = getattr(loaded.model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    return sorted(ids)
