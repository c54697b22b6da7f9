"""One request's answer as a :class:`~core.jobs.StepsJob`: built on the model thread, reported to the asyncio loop.

The listener side runs on the model thread and only posts events (``post`` is thread-safe, e.g.
``loop.call_soon_threadsafe``); the HTTP handler reads them in order: one :class:`Started` (or an
:class:`Ended` with the error), :class:`Delta` texts, one :class:`Ended`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.jobs import NO_MODEL, JobFailure, StepsJob
from core.progress import CancelToken
from core.server.errors import ApiError
from core.server.protocol import CompletionRequest
from core.settings import LookaheadSettings, SamplingSettings, Settings

FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}


@dataclass(frozen=True)
class AnswerDefaults:
    """What a request does not say takes the app's settings: decoding mode, W N G, sampling."""

    mode: str
    lookahead: LookaheadSettings
    sampling: SamplingSettings

    @classmethod
    def from_settings(cls, settings: Settings) -> "AnswerDefaults":
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
    """Builds the answer for ``request`` with the loaded model and reports it as :data:`Event` s through ``post``."""

    def __init__(self, request: CompletionRequest, defaults: AnswerDefaults, max_tokens_limit: int,
                 post: Callable[[Event], None]) -> None:
        self.request, self.post = request, post
        self.mode = request.mode or defaults.mode
        self.lookahead = defaults.lookahead
        self.sampling = request.sampling(defaults.sampling, max_tokens_limit)
        self.cancel = CancelToken()
        self.answer: Any = None  # core.chat.answer.Answer once built
        self.label = self.mode
        self._rejection: ApiError | None = None

    def job(self) -> StepsJob:
        return StepsJob(self.build, self, self.cancel, "The answer")

    def build(self, loaded: Any) -> Any:
        """The answer's step iterator (model thread); a prompt that does not fit is the client's error (400)."""
        from core.chat.answer import Answer
        from core.tuning import decoding_plan

        plan = decoding_plan(self.mode, self.lookahead, loaded)
        source = list(self.request.messages) if self.request.chat else self.request.prompt
        try:
            self.answer = Answer(loaded, source, lookahead=plan.lookahead, chooser=plan.chooser,
                                 max_new_tokens=self.sampling.max_new_tokens, stop_strings=self.sampling.stop_strings,
                                 cancel=self.cancel, sampling=self.sampling)
        except ValueError as err:  # the prompt (with max_tokens) does not fit the context, or the template refused it
            self._rejection = ApiError(400, str(err), code="context_length_exceeded", param="messages")
            raise
        self.label = plan.label
        self.post(Started(self.label, len(self.answer.prompt_ids)))
        return self.answer

    def yielded(self, steps: list[Any]) -> None:
        self.post(Delta("".join(step.text for step in steps)))

    def errored(self, failure: JobFailure) -> None:
        error = self._rejection
        if error is None and failure.message == NO_MODEL:
            error = ApiError(503, failure.message, kind="server_error", code="model_not_ready")
        if error is None:
            error = ApiError(500, failure.message, kind="server_error", code=failure.kind)
        self.post(self._ended("errored", error))

    def aborted(self) -> None:
        self.post(self._ended("aborted"))

    def finished(self) -> None:
        self.post(self._ended("finished"))

    def _ended(self, outcome: str, error: ApiError | None = None) -> Ended:
        answer = self.answer
        if answer is None:
            return Ended(outcome, error=error)
        stats = answer.stats
        mode = f"auto: {stats.settings_summary}" if self.label == "auto" and stats.setting_tokens else self.label
        figures = {"mode": mode, "tokens_per_step": round(stats.tokens_per_step, 4), "steps": stats.steps,
                   "tokens_per_second": round(stats.tokens_per_second, 2)}
        return Ended(outcome, FINISH_REASONS.get(answer.finish_reason or ""), len(answer.prompt_ids),
                     stats.new_tokens, figures, error)
