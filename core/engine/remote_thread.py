"""The remote thread: runs jobs that need no local model (remote answers) in order, beside the model thread.

A remote answer must not wait behind a model load or a local answer, and must not hold them up; it
spends its time waiting on the network, so one thread of its own serves them all.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter

from core.engine.answer_job import AnswerJob, AnswerListener, AnswerRequest
from core.engine.jobs import StepsJob
from core.progress import CancelToken

log = logging.getLogger(__name__)


class RemoteThread:
    """One background thread running step jobs without a model (``job.run(None)``), one at a time."""

    def __init__(self) -> None:
        self.endings: Counter[str] = Counter()
        self._jobs: queue.SimpleQueue[StepsJob | None] = queue.SimpleQueue()
        self._tokens: set[CancelToken] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="remote-thread", daemon=True)
        self._thread.start()

    def submit(self, job: StepsJob) -> None:
        """Queue a job that needs no model; thread-safe, never blocks."""
        with self._lock:
            self._tokens.add(job.cancel)
        self._jobs.put(job)

    def answer(self, request: AnswerRequest, listener: AnswerListener) -> None:
        """Queue one remote answer (``request.remote`` set); cancel ``request.cancel`` to stop it."""
        self.submit(AnswerJob(request, listener).steps_job())

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
        """Jobs queued or running."""
        with self._lock:
            return len(self._tokens)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self.endings[job.run(None)] += 1
            except Exception:  # a bug in a job must never stop the thread
                log.exception("a remote job failed")
            finally:
                with self._lock:
                    self._tokens.discard(job.cancel)
