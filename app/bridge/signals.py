"""Core's listener protocols as Qt signals: one QObject of signals per protocol, and a listener that emits them.

Each bridge has the same shape: a ``QObject`` whose signals mirror the protocol's methods, and a
``listener()`` that returns a plain object implementing the protocol by emitting those signals.
Core calls the listener on its model thread; the QObject lives on the GUI thread, so connected
slots run there (queued). Nothing here decides anything: it only carries reports across threads.

- :class:`LoadSignals`: :class:`core.engine.model_thread.ModelEvents` (model loads).
- :class:`AnswerSignals`: :class:`core.engine.answer_job.AnswerListener` (chat answers, tagged by job id).
- :class:`JobSignals`: :class:`core.engine.jobs.JobListener` (step jobs: comparisons, suite runs),
  in superqt's GeneratorWorker shape.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from core.engine.answer_job import AnswerFigures, AnswerOutcome, AnswerStart
from core.engine.jobs import JobFailure
from core.engine.ready import ModelInfo


class LoadSignals(QObject):
    """A model thread's loads: progress, then ``model_loaded`` or ``load_failed``; after a first load on a
    machine set-up, the background work's progress, then ``model_upgraded``."""

    load_progress = Signal(str, float)
    model_loaded = Signal(object)  # ModelInfo
    load_failed = Signal(str)
    background_progress = Signal(str, float)
    model_upgraded = Signal(object, str)  # ModelInfo, what got faster ("" if nothing)

    def listener(self) -> LoadListener:
        """A :class:`core.engine.model_thread.ModelEvents` that emits these signals."""
        return LoadListener(self)


class LoadListener:
    """Forwards a model thread's load reports to a :class:`LoadSignals`."""

    def __init__(self, signals: LoadSignals) -> None:
        self.signals = signals

    def load_progress(self, stage: str, fraction: float) -> None:
        self.signals.load_progress.emit(stage, fraction)

    def model_loaded(self, info: ModelInfo) -> None:
        self.signals.model_loaded.emit(info)

    def load_failed(self, message: str) -> None:
        self.signals.load_failed.emit(message)

    def background_progress(self, stage: str, fraction: float) -> None:
        self.signals.background_progress.emit(stage, fraction)

    def model_upgraded(self, info: ModelInfo, message: str) -> None:
        self.signals.model_upgraded.emit(info, message)


class AnswerSignals(QObject):
    """Chat answers: ``started`` once the prompt is built, ``delta`` as text becomes final, then ``ended`` once.

    Every signal carries the answer's job id first, so one object serves every answer.
    """

    started = Signal(int, object)  # job id, AnswerStart
    delta = Signal(int, str, object)  # job id, new text, AnswerFigures
    ended = Signal(int, object)  # job id, AnswerOutcome

    def listener(self, job_id: int) -> AnswerSignalListener:
        """A :class:`core.engine.answer_job.AnswerListener` for answer ``job_id`` that emits these signals."""
        return AnswerSignalListener(self, job_id)


class AnswerSignalListener:
    """Forwards one answer's reports to an :class:`AnswerSignals`, tagged with its job id."""

    def __init__(self, signals: AnswerSignals, job_id: int) -> None:
        self.signals, self.job_id = signals, job_id

    def started(self, start: AnswerStart) -> None:
        self.signals.started.emit(self.job_id, start)

    def delta(self, text: str, figures: AnswerFigures) -> None:
        self.signals.delta.emit(self.job_id, text, figures)

    def ended(self, outcome: AnswerOutcome) -> None:
        self.signals.ended.emit(self.job_id, outcome)


class JobSignals(QObject):
    """``yielded`` (a batch of steps), then one of ``errored``, ``aborted``, ``finished``; then ``ended``."""

    yielded = Signal(object)  # list of steps
    errored = Signal(object)  # JobFailure
    aborted = Signal()
    finished = Signal()
    ended = Signal()  # after any of the three: one place to return to idle

    def listener(self) -> JobSignalListener:
        """A :class:`core.engine.jobs.JobListener` that emits these signals."""
        return JobSignalListener(self)


class JobSignalListener:
    """Forwards :func:`core.engine.jobs.run_steps` reports to a :class:`JobSignals`."""

    def __init__(self, signals: JobSignals) -> None:
        self.signals = signals

    def yielded(self, steps: list[object]) -> None:
        self.signals.yielded.emit(steps)

    def errored(self, failure: JobFailure) -> None:
        self.signals.errored.emit(failure)
        self.signals.ended.emit()

    def aborted(self) -> None:
        self.signals.aborted.emit()
        self.signals.ended.emit()

    def finished(self) -> None:
        self.signals.finished.emit()
        self.signals.ended.emit()
