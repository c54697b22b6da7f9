"""One request's answer as events for its HTTP handler: the engine's answer job, heard on the model thread.

The listener side runs on the model thread and only posts events (``post`` is thread-safe, e.g.
``loop.call_soon_threadsafe``); the HTTP handler reads them in order: one :class:`Started` (or an
:class:`Ended` with the error), :class:`Delta` texts, one :class:`Ended`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.engine.answer_job import AnswerFigures, AnswerJob, AnswerOutcome, AnswerRequest, AnswerStart
from core.engine.jobs import NO_MODEL, StepsJob
from core.lookahead.finish import FinishReason
from core.progress import CancelToken
from core.server.errors import ApiError
from core.server.protocol import CompletionRequest
from core.settings import LookaheadSettings, SamplingSettings, Settings

FINISH_REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}
OUTCOMES = {FinishReason.CANCELLED: "aborted", FinishReason.ERROR: "errored"}  # any other finish reason: finished


@dataclass(frozen=True)
class AnswerDefaults:
    """What a request does not say takes the app's settings: decoding mode, W N G, sampling."""

    mode: str
    lookahead: LookaheadSettings
    sampling: SamplingSettings

    @classmethod
    def from_settings(cls, settings: Settings) -> AnswerDefaults:
        return cls(settings.mode, settings.lookahead, settings.sampling)


@dataclass(frozen=True)
class Started:
    mode: str  # "plain", "auto", "lookahead W7 N5 G7"
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Ended:
    """How the answer ended: ``outcome`` is finished, aborted or errored (then ``error`` says why)."""

    outcome: str
    finish_reason: str | None = None  # OpenAI's: stop or length
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lookahead: dict[str, Any] = field(default_factory=dict)
    error: ApiError | None = None


Event = Started | Delta | Ended


class ServerAnswer:
    """The answer for ``request`` with the app's ``defaults``, reported as :data:`Event` s through ``post``."""

    def __init__(
        self, request: CompletionRequest, defaults: AnswerDefaults, max_tokens_limit: int, post: Callable[[Event], None]
    ) -> None:
        self.post = post
        self.cancel = CancelToken()
        messages = tuple(request.messages) if request.chat else request.prompt
        self.request = AnswerRequest(
            messages,
            request.mode or defaults.mode,
            defaults.lookahead,
            request.sampling(defaults.sampling, max_tokens_limit),
            cancel=self.cancel,
        )
        self._prompt_tokens = 0

    def job(self) -> StepsJob:
        return AnswerJob(self.request, self).steps_job()

    def started(self, start: AnswerStart) -> None:
        self._prompt_tokens = start.prompt_tokens
        self.post(Started(start.mode, start.prompt_tokens))

    def delta(self, text: str, figures: AnswerFigures) -> None:
        self.post(Delta(text))

    def ended(self, outcome: AnswerOutcome) -> None:
        self.post(_ended(outcome, self._prompt_tokens))


def _ended(outcome: AnswerOutcome, prompt_tokens: int) -> Ended:
    state = OUTCOMES.get(outcome.finish_reason, "finished")
    error = None
    if outcome.failure is not None:
        if outcome.rejected:  # the prompt (with max_tokens) does not fit the context, or the template refused it
            error = ApiError(400, outcome.failure.message, code="context_length_exceeded", param="messages")
        elif outcome.failure.message == NO_MODEL:
            error = ApiError(503, outcome.failure.message, kind="server_error", code="model_not_ready")
        else:
            error = ApiError(500, outcome.failure.message, kind="server_error", code=outcome.failure.kind)
    figures = outcome.figures
    if figures is None:
        return Ended(state, error=error)
    lookahead = {
        "mode": figures.mode,
        "tokens_per_step": round(figures.tokens_per_step, 4),
        "steps": figures.steps,
        "tokens_per_second": round(figures.tokens_per_second, 2),
    }
    return Ended(state, FINISH_REASONS.get(outcome.finish_reason), prompt_tokens, figures.new_tokens, lookahead, error)
