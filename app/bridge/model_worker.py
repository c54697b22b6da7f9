"""The window's model worker: the engine's model thread (:class:`core.engine.model_thread.ModelThread`) behind Qt signals.

The GUI thread only queues work and cancels tokens; what the thread reports comes back through the
bridges of :mod:`app.bridge.signals` (``loads`` and ``answers``), whose slots run on the GUI thread.
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import QObject

from app.bridge.signals import AnswerSignals, LoadSignals
from core.engine.answer_job import AnswerRequest
from core.engine.jobs import StepsJob
from core.engine.model_thread import ModelThread
from core.engine.remote_thread import RemoteThread
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken


class ModelWorker(QObject):
    """Runs model work on the model thread, one job at a time, in the order asked.

    ``loads`` reports model loads, ``answers`` the answers :meth:`generate` queued (by job id).
    """

    def __init__(self, paths: AppPaths) -> None:
        super().__init__()
        self.paths = paths
        self.loads = LoadSignals(self)
        self.answers = AnswerSignals(self)
        self._ids = itertools.count(1)
        self.thread = ModelThread(paths, self.loads.listener())
        self.remote = RemoteThread()  # remote answers: they never wait behind a load or a local answer

    def load(self, source: ModelSource, options: LoadOptions) -> CancelToken:
        """Queue a model load that replaces the current model (see :meth:`ModelThread.load`)."""
        return self.thread.load(source, options)

    def generate(self, request: AnswerRequest) -> int:
        """Queue an answer; returns its job id. Cancel ``request.cancel`` to stop it."""
        job_id = next(self._ids)
        (self.thread if request.remote is None else self.remote).answer(request, self.answers.listener(job_id))
        return job_id

    def cancel_background(self) -> None:
        """Stop the background measurement (Cancel in the status bar): Auto stays plain until the next load."""
        self.thread.cancel_background()

    def run_job(self, job: StepsJob) -> None:
        """Queue a step job; it runs with the loaded model after the jobs queued before it (Compare mode too),
        or on the remote thread when it needs no model."""
        (self.thread if job.needs_model else self.remote).submit(job)

    def forget(self, conversation_id: int) -> None:
        """Drop a conversation's n-gram pool (deleted, or its history was edited)."""
        self.thread.forget(conversation_id)

    def shutdown(self, timeout: float = 1.5) -> bool:
        """Cancel everything, stop the thread; True if it ended within ``timeout`` seconds."""
        remote_done = self.remote.shutdown(timeout / 2)
        return self.thread.shutdown(timeout) and remote_done

    @property
    def outstanding(self) -> int:
        """Loads and step jobs queued or running: 0 when the worker is idle and nothing is left behind."""
        return self.thread.outstanding + self.remote.outstanding

    @property
    def running(self) -> bool:
        return self.thread.running
