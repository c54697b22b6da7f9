"""The window's model worker: the engine's model thread (:class:`core.engine.model_thread.ModelThread`) as Qt signals.

The GUI thread only queues work and cancels tokens; what the thread reports comes back as queued
Qt signals, whose slots run on the GUI thread.
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import QObject, Signal

from core.engine.answer_job import AnswerFigures, AnswerOutcome, AnswerRequest, AnswerStart
from core.engine.jobs import StepsJob
from core.engine.model_thread import ModelThread
from core.engine.ready import ModelInfo
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken


class ModelWorker(QObject):
    """Runs model work on the model thread, one job at a time, in the order asked."""

    load_progress = Signal(str, float)
    model_loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str)
    answer_started = Signal(int, object)  # job id, AnswerStart
    answer_delta = Signal(int, str, object)  # job id, new text, AnswerFigures
    answer_finished = Signal(int, object)  # job id, AnswerOutcome

    def __init__(self, paths: AppPaths) -> None:
        super().__init__()
        self.paths = paths
        self._ids = itertools.count(1)
        self.thread = ModelThread(paths, _LoadSignals(self))

    def load(self, source: ModelSource, options: LoadOptions) -> CancelToken:
        """Queue a model load that replaces the current model (see :meth:`ModelThread.load`)."""
        return self.thread.load(source, options)

    def generate(self, request: AnswerRequest) -> int:
        """Queue an answer; returns its job id. Cancel ``request.cancel`` to stop it."""
        job_id = next(self._ids)
        self.thread.answer(request, _AnswerSignals(self, job_id))
        return job_id

    def run_job(self, job: StepsJob) -> None:
        """Queue a step job; it runs with the loaded model after the jobs queued before it (Compare mode too)."""
        self.thread.submit(job)

    def forget(self, conversation_id: int) -> None:
        """Drop a conversation's n-gram pool (deleted, or its history was edited)."""
        self.thread.forget(conversation_id)

    def shutdown(self, timeout: float = 1.5) -> bool:
        """Cancel everything, stop the thread; True if it ended within ``timeout`` seconds."""
        return self.thread.shutdown(timeout)

    @property
    def outstanding(self) -> int:
        """Loads and step jobs queued or running: 0 when the worker is idle and nothing is left behind."""
        return self.thread.outstanding

    @property
    def running(self) -> bool:
        return self.thread.running


class _LoadSignals:
    """The thread's :class:`~core.engine.model_thread.ModelEvents` as the worker's load signals."""

    def __init__(self, worker: ModelWorker) -> None:
        self.worker = worker

    def load_progress(self, stage: str, fraction: float) -> None:
        self.worker.load_progress.emit(stage, fraction)

    def model_loaded(self, info: ModelInfo) -> None:
        self.worker.model_loaded.emit(info)

    def load_failed(self, message: str) -> None:
        self.worker.load_failed.emit(message)


class _AnswerSignals:
    """One answer's listener: its reports as the worker's ``answer_*`` signals, tagged with its job id."""

    def __init__(self, worker: ModelWorker, job_id: int) -> None:
        self.worker, self.job_id = worker, job_id

    def started(self, start: AnswerStart) -> None:
        self.worker.answer_started.emit(self.job_id, start)

    def delta(self, text: str, figures: AnswerFigures) -> None:
        self.worker.answer_delta.emit(self.job_id, text, figures)

    def ended(self, outcome: AnswerOutcome) -> None:
        self.worker.answer_finished.emit(self.job_id, outcome)
