"""The model worker: one background thread that owns the model and runs loads and answers.

The GUI thread only queues jobs and cancels tokens; results come back as queued Qt signals.
"""

from __future__ import annotations

import gc
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.jobs import AnswerFigures, AnswerOutcome, AnswerRequest, AnswerStart, ModelInfo
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken

log = logging.getLogger(__name__)

EMIT_INTERVAL_S = 0.05  # streamed text reaches the GUI at most 20 times a second
OOM_ADVICE = (
    "The device ran out of memory while generating; the text so far is kept. "
    "Use a smaller lookahead window (lower W and G, or plain mode), or load the model in 4-bit "
    "(Settings, Model, Quantization)."
)


@dataclass(frozen=True)
class _Load:
    source: ModelSource
    options: LoadOptions
    cancel: CancelToken


@dataclass(frozen=True)
class _Answer:
    job_id: int
    request: AnswerRequest


@dataclass(frozen=True)
class _Forget:
    conversation_id: int


@dataclass(frozen=True)
class _Call:
    job: Callable[[Any], None]  # called with the LoadedModel, or None when none is loaded


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
        self._jobs: queue.SimpleQueue[_Load | _Answer | _Forget | _Call | None] = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._tokens: set[CancelToken] = set()
        self._lock = threading.Lock()
        self._loaded = None  # LoadedModel; touched only on the worker thread
        self._pools = None  # ConversationPools; worker thread only
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
        with self._lock:
            self._tokens.add(request.cancel)
        self._jobs.put(_Answer(job_id, request))
        return job_id

    def forget(self, conversation_id: int) -> None:
        """Drop a conversation's n-gram pool (deleted, or its history was edited)."""
        self._jobs.put(_Forget(conversation_id))

    def call_with_model(self, job: Callable[[Any], None]) -> None:
        """Queue ``job(loaded model or None)`` on the model thread, after the jobs queued before (Compare mode)."""
        self._jobs.put(_Call(job))

    def shutdown(self, timeout: float = 1.5) -> bool:
        """Cancel everything, stop the thread; True if it ended within ``timeout`` seconds."""
        with self._lock:
            for token in self._tokens:
                token.cancel()
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        from core.chat.pools import ConversationPools

        self._pools = ConversationPools()
        while (job := self._jobs.get()) is not None:
            if isinstance(job, _Load):
                self._load(job)
            elif isinstance(job, _Answer):
                self._answer(job)
            elif isinstance(job, _Call):
                self._call(job)
            else:
                self._pools.forget(job.conversation_id)
            with self._lock:
                if isinstance(job, (_Load, _Answer)):
                    self._tokens.discard(job.cancel if isinstance(job, _Load) else job.request.cancel)
        log.info("model worker stopped")

    def _load(self, job: _Load) -> None:
        from core.calibration import ensure_calibrated
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
            # Cancel during the measurement keeps the model: Auto then decodes plain until the next load.
            ensure_calibrated(loaded, self.paths, progress, job.cancel)
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
                loaded.calibration.reason if loaded.calibration else "Auto: plain (the measurement was cancelled; it runs at the next load)",
            )
        )

    def _release_model(self) -> None:
        if self._loaded is None:
            return
        import torch

        self._loaded = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _answer(self, job: _Answer) -> None:
        import torch

        from core.chat.answer import Answer
        from core.calibration import save_learned
        from core.models.device import describe_device
        from core.tuning import decoding_plan

        request, loaded = job.request, self._loaded
        if loaded is None:
            self._fail(job.job_id, "No model is loaded. Wait for the model to load, or choose one in Settings.")
            return
        plan = decoding_plan(request.mode, request.lookahead, loaded)
        mode = plan.label
        shape = plan.pool_shape
        pool = self._pools.pool_for(request.conversation_id, *shape) if shape else None
        try:
            answer = Answer(
                loaded,
                list(request.messages),
                lookahead=plan.lookahead,
                chooser=plan.chooser,
                max_new_tokens=request.sampling.max_new_tokens,
                stop_strings=request.sampling.stop_strings,
                pool=pool,
                cancel=request.cancel,
                sampling=request.sampling,
            )
        except ValueError as err:
            self._fail(job.job_id, str(err))
            return
        self.answer_started.emit(job.job_id, AnswerStart(mode, len(answer.prompt_ids), answer.dropped_messages, loaded.context_length))
        pending: list[str] = []
        last = time.monotonic()
        reason, error = "error", None
        try:
            for delta in answer:
                pending.append(delta.text)
                now = time.monotonic()
                if now - last >= EMIT_INTERVAL_S:
                    self.answer_delta.emit(job.job_id, "".join(pending), AnswerFigures.from_stats(mode, delta.stats))
                    pending.clear()
                    last = now
            reason = answer.finish_reason or "eos"
        except torch.OutOfMemoryError:
            log.warning("out of memory during generation")
            error = OOM_ADVICE
            if loaded.device.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as err:
            log.exception("generation failed")
            error = f"The answer stopped because of an error ({type(err).__name__}: {err}); the text so far is kept."
        if plan.chooser is not None:
            mode = f"auto: {answer.stats.settings_summary}" if answer.stats.setting_tokens else mode
            save_learned(loaded, self.paths)
        figures = AnswerFigures.from_stats(mode, answer.stats)
        if pending:
            self.answer_delta.emit(job.job_id, "".join(pending), figures)
        outcome = AnswerOutcome(answer.text, reason, figures, error, describe_device(loaded.device).label)
        self.answer_finished.emit(job.job_id, outcome)

    def _call(self, job: _Call) -> None:
        try:
            job.job(self._loaded)
        except Exception:  # the job reports its own errors; a bug in it must not stop the worker
            log.exception("a model job failed")

    def _fail(self, job_id: int, message: str) -> None:
        self.answer_finished.emit(job_id, AnswerOutcome("", "error", None, message))
