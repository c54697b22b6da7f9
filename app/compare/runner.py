"""Runs comparisons and suite benchmarks off the GUI thread; reports them as queued Qt signals.

Both are step jobs (:class:`core.jobs.StepsJob`) reached through a :data:`ModelCall`: a function
that runs one with the loaded model on a background thread. The main window passes its model
worker's ``run_job``, so a comparison queues behind (never beside) a chat answer and shares its
throttle, error path and cancel rule; :func:`thread_call` serves a model held directly (tests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from PySide6.QtCore import QObject, Signal

from app.job_signals import JobSignals
from core.compare import CompareRequest, ComparisonRun, RunStep
from core.compare.suites import run_suites
from core.jobs import JobFailure, StepsJob
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import CancelToken
from core.settings import Settings
from core.tuning import lookahead_for

ModelCall = Callable[[StepsJob], None]


def thread_call(loaded: LoadedModel) -> ModelCall:
    """A :data:`ModelCall` for a model held by the caller: each job gets its own thread."""

    def call(job: StepsJob) -> None:
        threading.Thread(target=job.run, args=(loaded,), name="compare", daemon=True).start()

    return call


def _not_a_step(event: object) -> bool:
    """Run started or finished: shown at once, not held for the throttle."""
    return not isinstance(event, RunStep)


class CompareRunner(QObject):
    """One job at a time: a comparison or a suite run. Stop cancels it within one decoding step."""

    events = Signal(object)  # list of core.compare events, in order
    compared = Signal(object)  # Comparison, finished or stopped
    suite_progress = Signal(str, float)
    suites_done = Signal(object)  # list[core.bench.report.Row]
    failed = Signal(object)  # core.jobs.JobFailure
    busy_changed = Signal(bool)

    def __init__(self, call: ModelCall | None, paths: AppPaths, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.call = call
        self.paths = paths
        self.busy = False
        self._cancel = CancelToken()
        self._run: ComparisonRun | None = None  # set on the job thread, read after it ended
        self._warmed: set[int] = set()  # id() of models already warmed up; job threads only
        self.job = JobSignals(self)
        self.job.yielded.connect(self._on_yielded)
        self.job.errored.connect(self._on_errored)
        self.job.finished.connect(self._on_finished)
        self.job.aborted.connect(self._on_aborted)
        self.job.ended.connect(self._on_ended)

    def compare(self, prompt: str, settings: Settings, max_new_tokens: int, repeats: int,
                conversation_id: str | None) -> None:
        """Start a comparison of ``prompt`` with the settings' lookahead parameters."""

        def build(loaded: LoadedModel) -> ComparisonRun:
            request = CompareRequest(prompt, settings.system_prompt, lookahead_for(settings.lookahead, loaded, self.paths),
                                     max_new_tokens, repeats, conversation_id)
            self._run = ComparisonRun(loaded, request, cancel, warm_up=id(loaded.model) not in self._warmed)
            self._warmed.add(id(loaded.model))
            return self._run

        self._run = None
        cancel = self._start()
        self._submit(StepsJob(build, self.job.listener(), cancel, "The comparison", urgent=_not_a_step))

    def run_suites(self, settings: Settings, max_new_tokens: int, limit: int) -> None:
        """Run the built-in suites (the first ``limit`` prompts of each), plain loop vs lookahead."""

        def build(loaded: LoadedModel) -> Iterator[list]:
            config = lookahead_for(settings.lookahead, loaded, self.paths)
            yield run_suites(loaded, config, max_new_tokens, limit=limit, progress=self.suite_progress.emit, cancel=cancel)

        self._run = None
        cancel = self._start()
        self._submit(StepsJob(build, self.job.listener(), cancel, "The suite run", urgent=lambda _rows: True))

    def stop(self) -> None:
        self._cancel.cancel()

    def _start(self) -> CancelToken:
        if self.busy:
            raise RuntimeError("A comparison is already running; stop it first.")
        if self.call is None:
            raise RuntimeError("No model is loaded yet.")
        self._cancel = CancelToken()
        self.busy = True
        self.busy_changed.emit(True)
        return self._cancel

    def _submit(self, job: StepsJob) -> None:
        assert self.call is not None
        self.call(job)

    def _on_yielded(self, batch: list[object]) -> None:
        if self._run is None:  # a suite run yields its table once
            self.suites_done.emit(batch[-1])
        else:
            self.events.emit(batch)

    def _on_errored(self, failure: JobFailure) -> None:
        self.failed.emit(failure)

    def _on_finished(self) -> None:
        if self._run is not None:
            self.compared.emit(self._run.result())

    def _on_aborted(self) -> None:
        if self._run is not None:
            comparison = self._run.result()
            comparison.cancelled = True  # stopped between steps: the run may not have seen the token itself
            self.compared.emit(comparison)

    def _on_ended(self) -> None:
        self.busy = False
        self.busy_changed.emit(False)
