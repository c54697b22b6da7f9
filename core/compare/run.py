"""Run a comparison: plain and lookahead on one prompt, one after the other, order alternating.

:class:`ComparisonRun` is an iterator of events (a run started, a step streamed, a run finished),
meant to be consumed off the GUI thread; :meth:`ComparisonRun.result` gives the comparison.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime

from core.chat.answer import Answer
from core.chat.prompt import Message
from core.compare.record import LOOKAHEAD, PLAIN, Comparison, RunRecord
from core.lookahead import LookaheadConfig
from core.lookahead.finish import FinishReason
from core.models.loader import LoadedModel
from core.progress import CancelToken
from core.settings import SamplingSettings

WARM_UP_TOKENS = 8


@dataclass(frozen=True)
class CompareRequest:
    """What to compare: the prompt, the settings both runs share (the chat's sampling: ``None`` is plain greedy),
    and how many repeats."""

    prompt: str
    system_prompt: str
    lookahead: LookaheadConfig
    max_new_tokens: int
    repeats: int = 1
    conversation_id: str | None = None
    sampling: SamplingSettings | None = None

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise ValueError("The prompt is empty: type something to compare.")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1 (got {self.repeats}).")
        if self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be at least 1 (got {self.max_new_tokens}).")


@dataclass(frozen=True)
class RunStarted:
    repeat: int
    mode: str


@dataclass(frozen=True)
class RunStep:
    """One forward pass of the current run: new text and the running totals."""

    repeat: int
    mode: str
    text: str
    tokens: int
    seconds: float
    new_tokens: int
    elapsed: float


@dataclass(frozen=True)
class RunDone:
    record: RunRecord


Event = RunStarted | RunStep | RunDone


def run_order(repeat: int) -> tuple[str, str]:
    """Which mode goes first in a repeat: plain on even repeats, lookahead on odd ones."""
    return (PLAIN, LOOKAHEAD) if repeat % 2 == 0 else (LOOKAHEAD, PLAIN)


class ComparisonRun:
    """Runs ``request`` on ``loaded``; iterate for events, then read :meth:`result`.

    Both modes answer as the chat does (:class:`~core.chat.answer.Answer`: the same prompt, sampling and
    timers), with a fresh n-gram pool per run, so repeats are independent. ``cancel`` is checked between steps.
    ``warm_up`` first runs both modes briefly, unrecorded, so first-call costs stay out.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        request: CompareRequest,
        cancel: CancelToken | None = None,
        warm_up: bool = False,
    ) -> None:
        self.loaded = loaded
        self.request = request
        self.cancel = cancel or CancelToken()
        self.warm_up = warm_up
        messages = [Message("system", request.system_prompt)] if request.system_prompt else []
        self.messages = [*messages, Message("user", request.prompt)]
        self._comparison = Comparison(
            id=uuid.uuid4().hex[:12],
            created=datetime.now().isoformat(timespec="seconds"),
            prompt=request.prompt,
            system_prompt=request.system_prompt,
            model=loaded.name,
            device=loaded.device_info.label,
            dtype=str(loaded.dtype).removeprefix("torch."),
            lookahead=request.lookahead.label,
            max_new_tokens=request.max_new_tokens,
            repeats=request.repeats,
            conversation_id=request.conversation_id,
        )

    def __iter__(self) -> Iterator[Event]:
        if self.warm_up:
            for mode in (PLAIN, LOOKAHEAD):
                for _ in self._answer(mode, WARM_UP_TOKENS):
                    pass
        for repeat in range(self.request.repeats):
            for position, mode in enumerate(run_order(repeat)):
                if self.cancel.cancelled:
                    self._comparison.cancelled = True
                    return
                yield RunStarted(repeat, mode)
                record = yield from self._measure(repeat, position, mode)
                if record is None:
                    self._comparison.cancelled = True
                    return
                self._comparison.runs.append(record)
                yield RunDone(record)

    def result(self) -> Comparison:
        """The comparison so far (complete once iteration has ended)."""
        return self._comparison

    def _answer(self, mode: str, max_new_tokens: int) -> Answer:
        return Answer(
            self.loaded,
            self.messages,
            lookahead=self.request.lookahead if mode == LOOKAHEAD else None,
            max_new_tokens=max_new_tokens,
            cancel=self.cancel,
            sampling=self.request.sampling,
        )

    def _measure(self, repeat: int, position: int, mode: str) -> Generator[Event, None, RunRecord | None]:
        """Stream one run; its record, or ``None`` when it was cancelled."""
        answer = self._answer(mode, self.request.max_new_tokens)
        new_tokens, elapsed, steps = 0, 0.0, 0
        for delta in answer:
            timed = delta.stats.step_seconds
            seconds = timed[-1] if len(timed) > steps else 0.0  # the text's tail comes after the last step
            steps = len(timed)
            new_tokens += delta.step_tokens
            elapsed += seconds
            yield RunStep(repeat, mode, delta.text, delta.step_tokens, seconds, new_tokens, elapsed)
        if answer.finish_reason == FinishReason.CANCELLED:
            return None
        stats = answer.stats
        return RunRecord(
            mode,
            repeat,
            position,
            answer.token_ids,
            answer.text,
            answer.finish_reason,
            list(stats.step_seconds),
            list(stats.step_tokens),
        )
