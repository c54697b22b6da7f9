"""Runs comparisons and suite benchmarks off the GUI thread; reports them as queued Qt signals.

The model is reached through a :data:`ModelCall`: a function that runs a job with the loaded
model on a background thread. The main window passes its model worker's, so a comparison queues
behind (never beside) a chat answer; :func:`thread_call` serves a model held directly (tests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from core.compare import CompareRequest, ComparisonRun, RunStep
from core.compare.suites import run_suites
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import CancelToken
from core.settings import Settings
from core.tuning import decoding_plan

log = logging.getLogger(__name__)

ModelCall = Callable[[Callable[[LoadedModel | None], None]], None]
EMIT_INTERVAL_S = 0.25  # streamed steps reach the GUI 4 times a second: GUI work competes with decoding for the CPU and the GIL


def thread_call(loaded: LoadedModel) -> ModelCall:
    """A :data:`ModelCall` for a model held by the caller: each job gets its own thread."""

    def call(job: Callable[[LoadedModel | None], None]) -> None:
        threading.Thread(target=job, args=(loaded,), name="compare", daemon=True).start()

    return call


class CompareRunner(QObject):
    """One job at a time: a comparison or a suite run. Stop cancels it within one decoding step."""

    events = Signal(object)  # list of core.compare events, in order
    compared = Signal(object)  # Comparison, finished or stopped
    suite_progress = Signal(str, float)
    suites_done = Signal(object)  # list[core.bench.report.Row]
    failed = Signal(str)
    busy_changed = Signal(bool)
    _ended = Signal()

    def __init__(self, call: ModelCall | None, paths: AppPaths, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.call = call
        self.paths = paths
        self.busy = False
        self._cancel = CancelToken()
        self._warmed: set[int] = set()  # id() of models already warmed up; job threads only
        self._ended.connect(self._on_ended)

    def compare(self, prompt: str, settings: Settings, max_new_tokens: int, repeats: int,
                conversation_id: str | None) -> None:
        """Start a comparison of ``prompt`` with the settings' lookahead parameters."""

        def job(loaded: LoadedModel) -> None:
            request = CompareRequest(prompt, settings.system_prompt, decoding_plan("lookahead", settings.lookahead, loaded).lookahead,
                                     max_new_tokens, repeats, conversation_id)
            run = ComparisonRun(loaded, request, cancel, warm_up=id(loaded.model) not in self._warmed)
            self._warmed.add(id(loaded.model))
            pending: list[object] = []
            last = time.monotonic()
            for event in run:
                pending.append(event)
                now = time.monotonic()
                if not isinstance(event, RunStep) or now - last >= EMIT_INTERVAL_S:
                    self.events.emit(pending)
                    pending, last = [], now
            if pending:
                self.events.emit(pending)
            self.compared.emit(run.result())

        cancel = self._start()
        self._submit(job)

    def run_suites(self, settings: Settings, max_new_tokens: int, limit: int) -> None:
        """Run the built-in suites (the first ``limit`` prompts of each), plain loop vs lookahead."""

        def job(loaded: LoadedModel) -> None:
            config = decoding_plan("lookahead", settings.lookahead, loaded).lookahead
            rows = run_suites(loaded, config, max_new_tokens, limit=limit, progress=self.suite_progress.emit, cancel=cancel)
            self.suites_done.emit(rows)

        cancel = self._start()
        self._submit(job)

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

    def _submit(self, job: Callable[[LoadedModel], None]) -> None:
        def guarded(loaded: LoadedModel | None) -> None:
            try:
                if loaded is None:
                    self.failed.emit("No model is loaded. Wait for the model to load, or choose one in Settings.")
                else:
                    job(loaded)
            except ValueError as err:  # e.g. a prompt too long for the context
                self.failed.emit(str(err))
            except Exception as err:  # a library error must not leave the page busy
                log.exception("comparison failed")
                self.failed.emit(f"The comparison stopped because of an error ({type(err).__name__}: {err}).")
            finally:
                self._ended.emit()

        assert self.call is not None
        self.call(guarded)

    def _on_ended(self) -> None:
        self.busy = False
        self.busy_changed.emit(False)
