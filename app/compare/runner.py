"""Runs comparisons and suite benchmarks off the GUI thread; reports them as queued Qt signals.

The jobs are core's (:mod:`core.compare.job`): step jobs (:class:`core.engine.jobs.StepsJob`) reached through a
:data:`ModelCall`, a function that runs one with the loaded model on a background thread. The main window
passes its model worker's ``run_job``, so a comparison queues behind (never beside) a chat answer and shares
its throttle, error path and cancel rule; :func:`thread_call` serves a model held directly (tests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal, Slot

from app.bridge.signals import JobSignals
from core.compare import ComparisonRun
from core.compare.job import comparison_job, remote_comparison_job, suites_job
from core.compare.remote_run import LocalRemoteRun
from core.engine.jobs import StepsJob
from core.engine.ready import ReadyModel
from core.paths import AppPaths
from core.progress import CancelToken
from core.settings import Settings

ModelCall = Callable[[StepsJob], None]


def thread_call(ready: ReadyModel) -> ModelCall:
    """A :data:`ModelCall` for a model held by the caller: each job gets its own thread."""

    def call(job: StepsJob) -> None:
        threading.Thread(target=job.run, args=(ready,), name="compare", daemon=True).start()

    return call


class _Job(QObject):
    """One comparison or suite run: its signals, whether the model thread has begun it, its run.

    Lives on the GUI thread, so the signals its model-thread listener emits arrive here queued.
    """

    def __init__(self, runner: CompareRunner) -> None:
        super().__init__(runner)
        self.runner = runner
        self.signals = JobSignals(self)
        self.cancel = CancelToken()
        self.started = threading.Event()  # set on the model thread when it builds the job
        self.run: ComparisonRun | LocalRemoteRun | None = None  # set on the model thread, read after its signals
        self.signals.yielded.connect(self._yielded)
        self.signals.errored.connect(runner.failed)
        self.signals.finished.connect(self._finished)
        self.signals.aborted.connect(self._aborted)
        self.signals.ended.connect(self._ended)

    def began(self, run: ComparisonRun | LocalRemoteRun | None) -> None:
        """The model thread has begun the job (``run``: what it iterates; a suite run: None)."""
        self.run = run
        self.started.set()

    @Slot(object)
    def _yielded(self, batch: list[object]) -> None:
        if self.run is None:  # a suite run yields its table once
            self.runner.suites_done.emit(batch[-1])
        else:
            self.runner.events.emit(batch)

    @Slot()
    def _finished(self) -> None:
        if self.run is not None:
            self.runner.compared.emit(self.run.result())

    @Slot()
    def _aborted(self) -> None:
        if self.run is not None:
            comparison = self.run.result()
            comparison.cancelled = True  # stopped between steps: the run may not have seen the token itself
            self.runner.compared.emit(comparison)

    @Slot()
    def _ended(self) -> None:
        self.runner._job_ended(self)


class CompareRunner(QObject):
    """One job at a time: a comparison or a suite run. Stop cancels it within one decoding step;
    a job still queued behind other model work (a chat answer) ends at once."""

    events = Signal(object)  # list of core.compare events, in order
    compared = Signal(object)  # Comparison, finished or stopped
    suite_progress = Signal(str, float)
    suites_done = Signal(object)  # list[core.bench.report.Row]
    failed = Signal(object)  # core.engine.jobs.JobFailure
    busy_changed = Signal(bool)

    def __init__(self, call: ModelCall | None, paths: AppPaths, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.call = call
        self.paths = paths
        self._job: _Job | None = None

    @property
    def busy(self) -> bool:
        return self._job is not None

    def compare(
        self, prompt: str, settings: Settings, max_new_tokens: int, repeats: int, conversation_id: str | None
    ) -> None:
        """Start a comparison of ``prompt`` with the settings' lookahead parameters and sampling."""
        self._run(
            lambda job: comparison_job(
                prompt,
                settings,
                max_new_tokens,
                repeats,
                conversation_id,
                job.signals.listener(),
                job.cancel,
                job.began,
            )
        )

    def compare_remote(self, prompt: str, settings: Settings, max_new_tokens: int) -> None:
        """Answer ``prompt`` with the local model, then with the remote source the settings name (``ValueError``
        where none is on)."""
        self._run(
            lambda job: remote_comparison_job(
                prompt, settings, max_new_tokens, job.signals.listener(), job.cancel, job.began
            )
        )

    def run_suites(self, settings: Settings, max_new_tokens: int, limit: int) -> None:
        """Run the built-in suites (the first ``limit`` prompts of each), plain loop vs lookahead."""
        self._run(
            lambda job: suites_job(
                settings, max_new_tokens, limit, self.suite_progress.emit, job.signals.listener(), job.cancel, job.began
            )
        )

    def stop(self) -> None:
        job = self._job
        if job is None:
            return
        job.cancel.cancel()
        if not job.started.is_set():  # still queued: the model thread will skip it
            job.signals.blockSignals(True)
            self._job = None
            self.busy_changed.emit(False)

    def _run(self, make: Callable[[_Job], StepsJob]) -> None:
        """Make a job and hand it to the model thread; where making it fails (the settings refuse it), the runner
        stays idle."""
        if self._job is not None:
            raise RuntimeError("A comparison is already running; stop it first.")
        if self.call is None:
            raise RuntimeError("No model is loaded yet.")
        job = _Job(self)
        try:
            work = make(job)
        except Exception:
            job.deleteLater()
            raise
        self._job = job
        self.busy_changed.emit(True)
        self.call(work)

    def _job_ended(self, job: _Job) -> None:
        if self._job is job:
            self._job = None
            self.busy_changed.emit(False)
        job.deleteLater()
