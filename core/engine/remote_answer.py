"""One answer from a remote OpenAI-compatible engine, as the answer job's step iterator.

The same shape as a local :class:`~core.chat.answer.Answer` (deltas with running :class:`DecodeStats`,
``text``, ``finish_reason``), so the job, the history, Stop and Continue treat both alike. Tokens are
the server's ``usage`` where it sends one; until then (and where it never does) each chunk counts as
one token, and the label says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from core.chat.answer import AnswerDelta
from core.chat.prompt import Message
from core.lookahead.finish import FinishReason
from core.lookahead.stats import DecodeStats
from core.progress import CancelToken
from core.remote import RemoteSource, RemoteStream, RemoteTarget, resolve_key
from core.settings import SamplingSettings

COUNTED_BY_CHUNKS = "tokens counted by chunks"


def request_body(model: str, messages: list[Message], sampling: SamplingSettings) -> dict[str, Any]:
    """The OpenAI request for ``messages`` with the user's sampling settings.

    temperature, top_p, max_tokens, seed and stop map one to one; top-k, min-p and the repetition
    penalty are not OpenAI fields (a strict server refuses unknown ones), so they stay local. A
    conversation ending with the assistant's text asks the server to continue it (vLLM's and
    llama.cpp's ``continue_final_message``; ``serve`` continues such a message by itself).
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "temperature": 0.0 if sampling.greedy else sampling.temperature,
        "max_tokens": sampling.max_new_tokens,
    }
    if sampling.top_p != 1.0:
        body["top_p"] = sampling.top_p
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.stop_strings:
        body["stop"] = list(sampling.stop_strings)
    if messages and messages[-1].role == "assistant":
        body.update(continue_final_message=True, add_generation_prompt=False)
    return body


class RemoteAnswer:
    """Streams the remote model's reply to ``messages``; iterate for :class:`AnswerDelta`.

    The key is read here (the variable the source names, or the credential store), on the job's
    thread: the store may be slow, and the key stays out of every request object.
    """

    def __init__(
        self, source: RemoteSource, messages: list[Message], sampling: SamplingSettings, cancel: CancelToken
    ) -> None:
        self.source = source
        target = RemoteTarget(source.url, resolve_key(source.url, source.key_env), source.timeouts)
        self._stream = RemoteStream(target, request_body(source.model, messages, sampling), cancel)
        self._counted = False  # the server's usage replaced the chunk count
        self.stats = DecodeStats(mode=self.label())
        self.text = ""
        self.finish_reason: FinishReason | None = None

    def label(self, lookahead: dict[str, Any] | None = None) -> str:
        """What ran: ``remote SmolLM2 at gpu:8000 (lookahead W4 N3 G4)``, and how the tokens were counted."""
        ran = f" ({lookahead['mode']})" if lookahead and isinstance(lookahead.get("mode"), str) else ""
        counted = "" if self._counted else f", {COUNTED_BY_CHUNKS}"
        return f"remote {self.source.model} at {self.source.host}{ran}{counted}"

    def __iter__(self) -> Iterator[AnswerDelta]:
        last = time.perf_counter()
        for event in self._stream:
            now = time.perf_counter()
            if event.text:
                self.text += event.text
                self.stats.record(1, now - last, prefill=self.stats.steps == 0)
                last = now
            if event.usage:
                self._use(event.usage)
            if event.finish_reason is not None:
                self.finish_reason = FinishReason.LENGTH if event.finish_reason == "length" else FinishReason.EOS
            if event.usage or event.lookahead:
                self.stats.mode = self.label(event.lookahead)
            if event.text or event.usage:
                yield AnswerDelta(event.text, 1 if event.text else 0, self.stats)

    def _use(self, usage: dict[str, Any]) -> None:
        tokens, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if isinstance(tokens, int) and tokens >= 0:
            self.stats.new_tokens = tokens
            self._counted = True
        if isinstance(prompt, int) and prompt >= 0:
            self.stats.prompt_tokens = prompt
