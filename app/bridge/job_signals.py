"""The Qt face of :mod:`core.engine.jobs`: a job's reports as queued signals, in superqt's GeneratorWorker shape."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from core.engine.jobs import JobFailure


class JobSignals(QObject):
    """``yielded`` (a batch of steps), then one of ``errored``, ``aborted``, ``finished``; then ``ended``.

    Emitted from the model thread; connected slots run on the thread the receiver lives on (the GUI).
    """

    yielded = Signal(object)  # list of steps
    errored = Signal(object)  # JobFailure
    aborted = Signal()
    finished = Signal()
    ended = Signal()  # after any of the three: one place to return to idle

    def listener(self) -> SignalListener:
        """A :class:`core.engine.jobs.JobListener` that emits these signals."""
        return SignalListener(self)


class SignalListener:
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
