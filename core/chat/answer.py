"""One chat answer: prompt within the context, decoding, and text deltas as they become final."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from core.chat.prompt import Message, build_prompt, raw_prompt
from core.chat.textstream import TextStream
from core.lookahead import AnswerMemory, Decoding, LookaheadConfig, NGramPool
from core.lookahead.decoder import StepChooser
from core.lookahead.finish import FinishReason
from core.lookahead.sampling import SamplingConfig, TokenPolicy
from core.lookahead.stats import DecodeStats
from core.models.loader import LoadedModel
from core.progress import CancelToken
from core.settings import SamplingSettings

MIN_PROMPT_TOKENS = 16
"""Fewer than this left for the prompt and not even a short question fits."""


def prompt_budget(context_length: int, max_new_tokens: int) -> int:
    """The tokens left for the prompt; ValueError with what to do when too few are (checked before
    a load's measurements too, so a command line learns it at once)."""
    budget = context_length - max_new_tokens
    if budget < MIN_PROMPT_TOKENS:
        raise ValueError(
            f"max new tokens ({max_new_tokens}) leaves no room for the prompt in this model's "
            f"context of {context_length} tokens. Lower 'max new tokens'."
        )
    return budget


@dataclass(frozen=True)
class AnswerDelta:
    """Text that became final in one decoding step, with the running statistics."""

    text: str
    step_tokens: int
    stats: DecodeStats


class Answer:
    """Generates the assistant's reply to ``messages``; iterate for :class:`AnswerDelta`.

    ``messages`` given as one text is a raw prompt to continue (no chat template), as a text
    completion asks.

    ``lookahead`` is a fixed setting (``None``: plain) unless ``chooser`` (Auto) picks each step's.
    ``sampling`` (temperature, top-k/p, min-p, repetition penalty, seed) applies to every mode;
    ``None`` is plain greedy. After iteration, :attr:`text`, :attr:`finish_reason` and :attr:`dropped_messages` tell
    what happened; :attr:`note` says when the prompt needed a fallback (empty otherwise).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        messages: list[Message] | str,
        *,
        lookahead: LookaheadConfig | None,
        max_new_tokens: int,
        chooser: StepChooser | None = None,
        stop_strings: tuple[str, ...] = (),
        pool: NGramPool | None = None,
        memory: AnswerMemory | None = None,
        cancel: CancelToken | None = None,
        sampling: SamplingSettings | None = None,
    ) -> None:
        budget = prompt_budget(loaded.context_length, max_new_tokens)
        if isinstance(messages, str):
            prompt = raw_prompt(loaded.tokenizer, messages, budget)
        else:
            prompt = build_prompt(loaded.tokenizer, messages, budget)
        self.dropped_messages = prompt.dropped_messages
        self.note = prompt.note
        self.prompt_ids = prompt.ids
        self._stream = TextStream(loaded.tokenizer, stop_strings)
        self._decoding = Decoding(
            loaded.prepared,
            prompt.ids,
            lookahead=lookahead,
            chooser=chooser,
            max_new_tokens=max_new_tokens,
            eos_token_ids=loaded.eos_token_ids,
            pool=pool,
            memory=memory,
            cancel=cancel,
            policy=policy_for(sampling, loaded) if sampling is not None else None,
        )
        self.finish_reason: FinishReason | None = None

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
                self.finish_reason = FinishReason.STOP
                return
        self.finish_reason = self._decoding.finish_reason
        tail = self._stream.flush()
        if tail:
            yield AnswerDelta(tail, 0, self._decoding.stats)


def policy_for(sampling: SamplingSettings, loaded: LoadedModel) -> TokenPolicy | None:
    """The token policy for the user's sampling settings; None for plain greedy (the fast path)."""
    if sampling.greedy:
        if sampling.repetition_penalty == 1.0:
            return None
        processors = SamplingConfig(repetition_penalty=sampling.repetition_penalty).processors()
        return TokenPolicy(processors, do_sample=False)
    config = SamplingConfig(
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=sampling.min_p,
        repetition_penalty=sampling.repetition_penalty,
        seed=sampling.seed,
    )
    return TokenPolicy.from_config(config, loaded.device)
