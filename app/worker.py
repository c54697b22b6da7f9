"""The model worker: one background thread that owns the model and runs loads and step jobs.

The GUI thread only queues jobs and cancels tokens; results come back as queued Qt signals. Every
job that produces steps (a chat answer, a comparison, a suite run) goes through
:func:`core.jobs.run_steps`: one throttle, one error path, one cancel rule. No job's failure, of
any kind, stops the thread.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.jobs import AnswerFigures, AnswerOutcome, AnswerRequest, AnswerStart, ModelInfo
from core.jobs import EMIT_INTERVAL_S, JobFailure, StepsJob
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Load:
    source: ModelSource
    options: LoadOptions
    cancel: CancelToken


@dataclass(frozen=True)
class _Forget:
    conversation_id: int


class ModelWorker(QObject):
    """Runs model work on its own thread, one job at a time, in the order asked."""

    load_progress = Signal(str, float)
    model_loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str)
    answer_started = Signal(int, object)  # job id, AnswerStart
    answer_delta = Signal(int, str, object)  # job id, new text, AnswerFigures
    answer_finished = Signal(int, object)  # job id, AnswerOutcome

    def __init__(self, paths: AppPaths) -> None:
        super().__init__()
        self.paths = paths
        self._jobs: queue.SimpleQueue[_Load | StepsJob | _Forget | None] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._tokens: set[CancelToken] = set()
        self._lock = threading.Lock()
        self._loaded = None  # LoadedModel; touched only on the worker thread
        self.pools = None  # ConversationPools; worker thread only
        self._thread = threading.Thread(target=self._run, name="model-worker", daemon=True)
        self._thread.start()

    def load(self, source: ModelSource, options: LoadOptions) -> CancelToken:
        """Queue a model load that replaces the current model; the work queued or running before it
        (an older load, an answer) is cancelled, since it was for the model being replaced."""
        token = CancelToken()
        with self._lock:
            for other in self._tokens:
                other.cancel()
            self._tokens = {token}
        self._jobs.put(_Load(source, options, token))
        return token

    def generate(self, request: AnswerRequest) -> int:
        """Queue an answer; returns its job id. Cancel ``request.cancel`` to stop it."""
        job_id = next(self._ids)
        report = _AnswerReport(self, job_id, request)
        self.run_job(StepsJob(report.start, report, request.cancel, "The answer"))
        return job_id

    def run_job(self, job: StepsJob) -> None:
        """Queue a step job; it runs with the loaded model after the jobs queued before it (Compare mode too)."""
        with self._lock:
            self._tokens.add(job.cancel)
        self._jobs.put(job)

    def forget(self, conversation_id: int) -> None:
        """Drop a conversation's n-gram pool (deleted, or its history was edited)."""
        self._jobs.put(_Forget(conversation_id))

    def shutdown(self, timeout: float = 1.5) -> bool:
        """Cancel everything, stop the thread; True if it ended within ``timeout`` seconds."""
        with self._lock:
            for token in self._tokens:
                token.cancel()
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def outstanding(self) -> int:
        """Loads and step jobs queued or running: 0 when the worker is idle and nothing is left behind."""
        with self._lock:
            return len(self._tokens)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        from core.chat.pools import ConversationPools

        self.pools = ConversationPools()
        while (job := self._jobs.get()) is not None:
            try:
                self._serve(job)
            except Exception:  # a bug in a job must never stop the thread that serves the window
                log.exception("a model job failed")
            finally:
                if isinstance(job, (_Load, StepsJob)):
                    with self._lock:
                        self._tokens.discard(job.cancel)
        log.info("model worker stopped")

    def _serve(self, job: _Load | StepsJob | _Forget) -> None:
        if isinstance(job, _Load):
            self._load(job)
        elif isinstance(job, StepsJob):
            job.run(self._loaded)
        else:
            self.pools.forget(job.conversation_id)

    def _load(self, job: _Load) -> None:
        from core.calibration import calibrate_or_plain
        from core.models import ModelError, load_model
        from core.models.device import NAME_BY_DTYPE

        if job.cancel.cancelled:
            return
        self._release_model()
        last = [0.0]

        def progress(stage: str, fraction: float) -> None:
            now = time.monotonic()
            if now - last[0] >= EMIT_INTERVAL_S or fraction >= 1.0:
                last[0] = now
                self.load_progress.emit(stage, fraction)

        try:
            loaded = load_model(job.source, job.options, self.paths.ensure(), progress, job.cancel)
            # Cancel (or a failure) during the measurement keeps the model: Auto then decodes plain.
            auto_reason = calibrate_or_plain(loaded, self.paths, progress, job.cancel)
        except ModelError as err:
            self.load_failed.emit(str(err))
            return
        except Exception as err:  # a bug or an unexpected library error must not kill the worker
            log.exception("model load failed")
            self.load_failed.emit(f"Loading the model failed unexpectedly: {err}. Check the model files or choose another model.")
            return
        with self._lock:
            superseded = job.cancel.cancelled and job.cancel not in self._tokens
        if superseded:  # a newer load was queued while this one measured: it replaces this model
            return
        self._loaded = loaded
        self.model_loaded.emit(
            ModelInfo(
                loaded.name,
                loaded.device_info.label,
                loaded.device_info.kind,
                NAME_BY_DTYPE.get(loaded.dtype, str(loaded.dtype)),
                loaded.quantization,
                loaded.context_length,
                loaded.parameters,
                loaded.load_seconds,
                auto_reason,
            )
        )

    def _release_model(self) -> None:
        if self._loaded is None:
            return
        import torch

        self._loaded = None  # no gc.collect() on this thread: it could destroy Qt objects here (app/gc_guard.py)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class _AnswerReport:
    """One chat answer as a step job: builds the :class:`~core.chat.answer.Answer` and reports it as
    the worker's ``answer_*`` signals (model thread)."""

    def __init__(self, worker: ModelWorker, job_id: int, request: AnswerRequest) -> None:
        self.worker, self.job_id, self.request = worker, job_id, request
        self.answer: Any = None  # core.chat.answer.Answer once built
        self.loaded: Any = None  # the LoadedModel it runs on
        self.plan: Any = None  # core.tuning.DecodingPlan
        self.mode = request.mode
        self.device = None  # torch.device of the model

    def start(self, loaded: Any) -> Any:
        """Build the answer (its prompt, sampling, pool); announce it."""
        from core.chat.answer import Answer
        from core.tuning import decoding_plan

        request = self.request
        self.device = loaded.device
        self.loaded = loaded
        self.plan = decoding_plan(request.mode, request.lookahead, loaded)
        self.mode = self.plan.label
        shape = self.plan.pool_shape
        pool = self.worker.pools.pool_for(request.conversation_id, *shape) if shape else None
        self.answer = Answer(
            loaded,
            list(request.messages),
            lookahead=self.plan.lookahead,
            chooser=self.plan.chooser,
            max_new_tokens=request.sampling.max_new_tokens,
            stop_strings=request.sampling.stop_strings,
            pool=pool,
            cancel=request.cancel,
            sampling=request.sampling,
        )
        start = AnswerStart(self.mode, len(self.answer.prompt_ids), self.answer.dropped_messages,
                            loaded.context_length, self.answer.note)
        self.worker.answer_started.emit(self.job_id, start)
        return self.answer

    def yielded(self, deltas: list[Any]) -> None:
        figures = AnswerFigures.from_stats(self.mode, deltas[-1].stats)
        self.worker.answer_delta.emit(self.job_id, "".join(d.text for d in deltas), figures)

    def errored(self, failure: JobFailure) -> None:
        if failure.kind == "out-of-memory" and self.device is not None and self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        kept = " The text so far is kept." if self.answer is not None and self.answer.text else ""
        self._end("error", failure.message + kept)

    def aborted(self) -> None:
        self._end("cancelled")

    def finished(self) -> None:
        self._end(self.answer.finish_reason or "eos")

    def _end(self, reason: str, error: str | None = None) -> None:
        from core.models.device import describe_device

        answer = self.answer
        if answer is not None and self.plan is not None and self.plan.chooser is not None:
            from core.calibration import save_learned

            if answer.stats.setting_tokens:  # the record says which settings ran, for how many tokens
                self.mode = f"auto: {answer.stats.settings_summary}"
            save_learned(self.loaded, self.worker.paths)
        figures = AnswerFigures.from_stats(self.mode, answer.stats) if answer is not None else None
        device = describe_device(self.device).label if self.device is not None else None
        text = answer.text if answer is not None else ""
        self.worker.answer_finished.emit(self.job_id, AnswerOutcome(text, reason, figures, error, device))
