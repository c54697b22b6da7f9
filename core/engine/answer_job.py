"""The one answer job: what every front door (the window, ``ask``, the server) runs to answer a chat turn.

It builds the decoding plan (plain, a fixed lookahead setting, or Auto), takes the conversation's
n-gram pool, runs the :class:`~core.chat.answer.Answer` as a :class:`~core.engine.jobs.StepsJob`, labels
what ran ("auto: W5 N4 G5 180, plain 20"), and keeps what Auto learned. A front door only adapts its
:class:`AnswerListener` (Qt signals, server-sent events, stdout).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch

from core.chat.answer import Answer, AnswerDelta
from core.chat.prompt import Message
from core.engine.jobs import JobFailure, StepsJob
from core.engine.plan import DecodingPlan, decoding_plan
from core.engine.ready import ReadyModel
from core.engine.remote_answer import RemoteAnswer
from core.lookahead.finish import FinishReason
from core.lookahead.stats import DecodeStats
from core.models.device import describe_device
from core.progress import CancelToken
from core.remote import RemoteSource
from core.settings import LookaheadSettings, SamplingSettings


@dataclass(frozen=True)
class AnswerRequest:
    """One answer to generate.

    Attributes:
        messages: the conversation (its last message is the user's), or one text: a raw prompt to
            continue without the chat template (a text completion).
        mode: ``auto``, ``plain`` or ``lookahead``.
        conversation_id: the conversation whose n-gram pool the answer uses and grows (``None``: a pool of its own).
        remote: a remote engine to answer instead of the local model (then mode and lookahead are unused).
    """

    messages: tuple[Message, ...] | str
    mode: str
    lookahead: LookaheadSettings
    sampling: SamplingSettings
    conversation_id: object | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    remote: RemoteSource | None = None


@dataclass(frozen=True)
class AnswerStart:
    """Sent once the prompt is built: the mode used, how much of the context it takes, and a note
    when the prompt needed a fallback (e.g. a template without a system role)."""

    mode: str  # "plain", "auto" or "lookahead W4 N4 G4"
    prompt_tokens: int
    dropped_messages: int
    context_length: int
    note: str = ""


@dataclass(frozen=True)
class AnswerFigures:
    """Speed figures of an answer (live while it streams, final when it ends)."""

    mode: str
    new_tokens: int = 0
    steps: int = 0
    tokens_per_second: float = 0.0
    tokens_per_step: float = 0.0
    prompt_tokens: int = 0
    time_to_first_token: float = 0.0
    seconds: float = 0.0

    @classmethod
    def from_stats(cls, mode: str, stats: DecodeStats) -> AnswerFigures:
        return cls(
            mode,
            stats.new_tokens,
            stats.steps,
            stats.tokens_per_second,
            stats.tokens_per_step,
            stats.prompt_tokens,
            stats.time_to_first_token,
            stats.total_seconds,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, mode: str | None) -> AnswerFigures | None:
        if not data:
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "mode"}
        return cls(mode or str(data.get("mode", "")), **known)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def remote(self) -> bool:
        """A remote engine answered: its "steps" are the chunks it streamed, so no tokens/step is shown."""
        return self.mode.startswith("remote ")

    def summary(self) -> str:
        """The line under an answer: ``38.2 tok/s · 1.9 tokens/step · lookahead W7 N5 G7 · 212 tokens``."""
        if self.remote:
            return f"{self.tokens_per_second:.1f} tok/s · {self.mode} · {self.new_tokens} tokens"
        return (
            f"{self.tokens_per_second:.1f} tok/s · {self.tokens_per_step:.2f} tokens/step · "
            f"{self.mode} · {self.new_tokens} tokens"
        )


@dataclass(frozen=True)
class AnswerOutcome:
    """How an answer ended.

    Attributes:
        finish_reason: why it ended (:class:`~core.lookahead.finish.FinishReason`).
        failure: why it failed (``error``); ``rejected`` when the request itself could not be answered
            (the prompt does not fit the context, the template refused it), before any decoding.
    """

    text: str
    finish_reason: FinishReason
    figures: AnswerFigures | None
    failure: JobFailure | None = None
    device_label: str | None = None
    rejected: bool = False

    @property
    def remote(self) -> bool:
        """A remote engine answered (its device label is ``remote host:port``)."""
        return (self.device_label or "").startswith("remote ")

    @property
    def error(self) -> str | None:
        """What the user reads when the answer failed: why, what to do, and that the text so far is kept."""
        if self.failure is None:
            return None
        return self.failure.message + (" The text so far is kept." if self.text else "")


class AnswerListener(Protocol):
    """What a front door hears of an answer: ``started`` once the prompt is built (not when it is
    rejected), ``delta`` as text becomes final, then ``ended`` exactly once. Called on the model thread."""

    def started(self, start: AnswerStart) -> None: ...

    def delta(self, text: str, figures: AnswerFigures) -> None: ...

    def ended(self, outcome: AnswerOutcome) -> None: ...


class AnswerJob:
    """One answer for ``request``, reported to ``listener``; :meth:`steps_job` is what a model thread runs."""

    def __init__(self, request: AnswerRequest, listener: AnswerListener) -> None:
        self.request, self.listener = request, listener
        self.answer: Answer | RemoteAnswer | None = None
        self._ready: ReadyModel | None = None
        self._plan: DecodingPlan | None = None
        self._mode = request.mode
        self._rejected = False

    def steps_job(self) -> StepsJob[AnswerDelta]:
        if self.request.remote is not None:  # no local model: it must not wait for one to load
            return StepsJob(self.build_remote, self, self.request.cancel, "The answer", needs_model=False)
        return StepsJob(self.build, self, self.request.cancel, "The answer")

    def build_remote(self, _ready: object) -> RemoteAnswer:
        """The remote answer's step iterator (on the job's thread): the request, and the key read there."""
        request = self.request
        assert request.remote is not None
        if isinstance(request.messages, str):
            raise ValueError("A remote source answers chats only: send the text as a chat message.")
        answer = RemoteAnswer(request.remote, list(request.messages), request.sampling, request.cancel)
        self.answer, self._mode = answer, answer.stats.mode
        self.listener.started(AnswerStart(self._mode, 0, 0, 0))
        return answer

    def build(self, ready: ReadyModel) -> Answer:
        """The answer's step iterator (model thread): its plan, prompt, sampling and pool."""
        request = self.request
        self._ready = ready
        self._plan = decoding_plan(request.mode, request.lookahead, ready.loaded, ready.auto)
        self._mode = self._plan.label
        shape = self._plan.pool_shape
        pool = (
            ready.pools.pool_for(request.conversation_id, *shape)
            if shape and request.conversation_id is not None
            else None
        )
        messages = request.messages if isinstance(request.messages, str) else list(request.messages)
        try:
            self.answer = Answer(
                ready.loaded,
                messages,
                lookahead=self._plan.lookahead,
                chooser=self._plan.chooser,
                max_new_tokens=request.sampling.max_new_tokens,
                stop_strings=request.sampling.stop_strings,
                pool=pool,
                memory=ready.memory,
                cancel=request.cancel,
                sampling=request.sampling,
            )
        except ValueError:  # the prompt (with max new tokens) does not fit the context, or the template refused it
            self._rejected = True
            raise
        answer = self.answer
        self.listener.started(
            AnswerStart(
                self._mode, len(answer.prompt_ids), answer.dropped_messages, ready.loaded.context_length, answer.note
            )
        )
        return answer

    # --- the job's listener (core.engine.jobs.JobListener) ---------------------------------------

    def yielded(self, deltas: list[AnswerDelta]) -> None:
        if isinstance(self.answer, RemoteAnswer):
            self._mode = self.answer.stats.mode  # the server's usage and lookahead figures name what ran
        self.listener.delta("".join(d.text for d in deltas), AnswerFigures.from_stats(self._mode, deltas[-1].stats))

    def errored(self, failure: JobFailure) -> None:
        ready = self._ready
        if failure.kind == "out-of-memory" and ready is not None and ready.loaded.device.type == "cuda":
            torch.cuda.empty_cache()
        self._end(FinishReason.ERROR, failure)

    def aborted(self) -> None:
        self._end(FinishReason.CANCELLED)

    def finished(self) -> None:
        assert self.answer is not None
        self._end(self.answer.finish_reason or FinishReason.EOS)

    def _end(self, reason: FinishReason, failure: JobFailure | None = None) -> None:
        answer, ready = self.answer, self._ready
        if answer is not None and ready is not None and self._plan is not None and self._plan.chooser is not None:
            if answer.stats.setting_tokens:  # the record says which settings ran, for how many tokens
                self._mode = f"auto: {answer.stats.settings_summary}"
            ready.auto.save_learned()
        if isinstance(answer, RemoteAnswer):
            self._mode = answer.stats.mode
        figures = AnswerFigures.from_stats(self._mode, answer.stats) if answer is not None else None
        device = describe_device(ready.loaded.device).label if ready is not None else None
        if self.request.remote is not None:
            device = f"remote {self.request.remote.host}"
        text = answer.text if answer is not None else ""
        self.listener.ended(AnswerOutcome(text, reason, figures, failure, device, self._rejected))
        if isinstance(answer, Answer) and ready is not None:  # later answers guess from this one, however it ended
            ready.memory.add(answer.token_ids)
