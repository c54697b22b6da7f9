"""Compare mode's local against remote: one prompt answered by the local model, then by the remote source.

Both sides run through the answers the chat runs (:class:`~core.chat.answer.Answer` with the
chat's decoding plan, :class:`~core.engine.remote_answer.RemoteAnswer`), with the same sampling and
answer length, and report as a comparison run does (``RunStarted``, ``RunStep``, ``RunDone``) so the
page streams both panes the same way. A remote side's tokens are its server's count where it sends one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime

from core.chat.answer import Answer, AnswerDelta
from core.chat.prompt import Message
from core.compare.record import Comparison, RunRecord
from core.compare.run import Event, RunDone, RunStarted, RunStep
from core.engine.plan import decoding_plan
from core.engine.ready import ReadyModel
from core.engine.remote_answer import RemoteAnswer
from core.progress import CancelToken
from core.remote import RemoteSource
from core.settings import Settings

LOCAL, REMOTE = "local", "remote"


class LocalRemoteRun:
    """The local model (``ready``) then ``remote`` on ``prompt``; iterate for events, then read :meth:`result`."""

    def __init__(
        self,
        ready: ReadyModel,
        remote: RemoteSource,
        settings: Settings,
        prompt: str,
        max_new_tokens: int,
        cancel: CancelToken,
    ) -> None:
        self.ready, self.remote, self.cancel = ready, remote, cancel
        self.sampling = replace(settings.sampling, max_new_tokens=max_new_tokens)
        self.plan = decoding_plan(settings.mode, settings.lookahead, ready.loaded, ready.auto)
        self.messages = [Message("system", settings.system_prompt)] if settings.system_prompt else []
        self.messages.append(Message("user", prompt))
        loaded = ready.loaded
        self._comparison = Comparison(
            id=uuid.uuid4().hex[:12],
            created=datetime.now().isoformat(timespec="seconds"),
            prompt=prompt,
            system_prompt=settings.system_prompt,
            model=f"{loaded.name} against {remote.model} at {remote.host}",
            device=loaded.device_info.label,
            dtype=str(loaded.dtype).removeprefix("torch."),
            lookahead=self.plan.label,
            max_new_tokens=max_new_tokens,
            repeats=1,
        )

    def __iter__(self) -> Iterator[Event]:
        local = Answer(
            self.ready.loaded,
            self.messages,
            lookahead=self.plan.lookahead,
            chooser=self.plan.chooser,
            max_new_tokens=self.sampling.max_new_tokens,
            cancel=self.cancel,
            sampling=self.sampling,
        )
        yield from self._side(LOCAL, 0, local)
        if not self.cancel.cancelled:
            yield from self._side(REMOTE, 1, RemoteAnswer(self.remote, self.messages, self.sampling, self.cancel))
        self._comparison.cancelled = self.cancel.cancelled

    def result(self) -> Comparison:
        return self._comparison

    def _side(self, side: str, position: int, answer: Answer | RemoteAnswer) -> Iterable[Event]:
        yield RunStarted(0, side)
        deltas: Iterator[AnswerDelta] = iter(answer)
        for delta in deltas:
            stats = delta.stats
            yield RunStep(0, side, delta.text, delta.step_tokens, 0.0, stats.new_tokens, stats.total_seconds)
        if self.cancel.cancelled:
            return
        stats = answer.stats
        tokens = list(stats.step_tokens)
        if tokens and sum(tokens) != stats.new_tokens:  # the server's usage counts what the chunks did not
            tokens[-1] = max(0, tokens[-1] + stats.new_tokens - sum(tokens))
        record = RunRecord(side, 0, position, [], answer.text, answer.finish_reason, list(stats.step_seconds), tokens)
        self._comparison.runs.append(record)
        yield RunDone(record)


def local_remote_summary(comparison: Comparison) -> str:
    """One line for the page: both rates and their ratio, e.g. ``local 31.2 tok/s · remote 80.5 tok/s · remote 2.58x``."""
    rates = {r.mode: r.stats.tokens_per_second for r in comparison.runs}
    parts = [f"{side} {rates[side]:.1f} tok/s" for side in (LOCAL, REMOTE) if side in rates]
    if rates.get(LOCAL) and REMOTE in rates:
        parts.append(f"remote {rates[REMOTE] / rates[LOCAL]:.2f}x the local rate")
    return " · ".join(parts) + "."
