"""The model runner contract the server submits to, and the headless runner of ``lookahead-chat serve``.

A runner owns the one model in memory and runs step jobs one at a time, first come first served.
The window's model worker is one (adapted in ``app/server_control.py``); :class:`ThreadRunner`
is the other, a plain thread for the command line.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from typing import Any, Protocol

from core.jobs import StepsJob

log = logging.getLogger(__name__)


class ModelRunner(Protocol):
    """Where the server's answers run."""

    @property
    def model_name(self) -> str | None:
        """The loaded model's name (its id in the API); None while none is loaded."""

    def submit(self, job: StepsJob) -> None:
        """Queue ``job``; it runs after the jobs queued before it. Thread-safe, never blocks."""


class ThreadRunner:
    """One model thread with a FIFO queue of step jobs; no job's failure stops it."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self._jobs: queue.SimpleQueue[StepsJob | None] = queue.SimpleQueue()
        self.endings: Counter[str] = Counter()  # how the jobs ended: finished, aborted, errored
        self._thread = threading.Thread(target=self._run, name="model-runner", daemon=True)
        self._thread.start()

    @property
    def model_name(self) -> str | None:
        return self.loaded.name

    @property
    def pending(self) -> int:
        """Jobs queued and not yet started."""
        return self._jobs.qsize()

    def submit(self, job: StepsJob) -> None:
        self._jobs.put(job)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop after the queued jobs (cancel them first to skip their work); True if the thread ended in time."""
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self.endings[job.run(self.loaded)] += 1
            except Exception:  # run_steps never raises for the job's failures; a bug must not stop the thread
                log.exception("a server job failed")
