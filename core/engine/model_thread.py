"""The model thread: one background thread that owns the one model in memory and runs loads and jobs in order.

The window (through its Qt adapter, ``app.bridge.model_worker``) and ``lookahead-chat serve`` both run on
it; the local server submits its answers to whichever runs it. Callers only queue work and cancel
tokens; what happens comes back through :class:`ModelEvents` and each job's own listener, on this
thread. No job's failure, of any kind, stops it. A model's background calibration
(``core.engine.background``) waits while a job runs, goes on when none is queued, and its result
replaces the model's step between jobs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import torch

from core.chat.history import recent_answers
from core.chat.pools import ConversationPools
from core.engine.answer_job import AnswerJob, AnswerListener, AnswerRequest
from core.engine.background import BackgroundCalibration, Upgrade
from core.engine.jobs import EMIT_INTERVAL_S, StepsJob
from core.engine.ready import ModelInfo, ReadyModel, make_ready
from core.models.errors import ModelError
from core.models.loader import load_model
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken

log = logging.getLogger(__name__)

REMEMBERED_CHARS = 200_000
"""Text of the newest saved answers a loaded model's memory starts with (about 50,000 tokens)."""


class ModelEvents(Protocol):
    """What a model thread reports of its loads (on the thread; progress at most every :data:`EMIT_INTERVAL_S`)."""

    def load_progress(self, stage: str, fraction: float) -> None: ...

    def model_loaded(self, info: ModelInfo) -> None: ...

    def load_failed(self, message: str) -> None: ...

    def background_progress(self, stage: str, fraction: float) -> None: ...

    def model_upgraded(self, info: ModelInfo, message: str) -> None:
        """The background work is done (or stopped): ``info`` says what Auto runs now, ``message`` what got
        faster ("" if nothing)."""


class NoEvents:
    """For a thread whose model is given (``serve``): nothing to report."""

    def load_progress(self, stage: str, fraction: float) -> None:
        """Not called: no load runs."""

    def model_loaded(self, info: ModelInfo) -> None:
        """Not called: no load runs."""

    def load_failed(self, message: str) -> None:
        """Not called: no load runs."""

    def background_progress(self, stage: str, fraction: float) -> None:
        """Nothing to show it on."""

    def model_upgraded(self, info: ModelInfo, message: str) -> None:
        """Nothing to show it on."""


@dataclass(frozen=True)
class _Load:
    source: ModelSource
    options: LoadOptions
    cancel: CancelToken


@dataclass(frozen=True)
class _Forget:
    conversation_id: object


@dataclass(frozen=True)
class _Upgrade:
    background: BackgroundCalibration
    upgrade: Upgrade


class _BackgroundReports:
    """A background calibration's reports: progress throttled to the events, its result queued as a job."""

    def __init__(self, thread: ModelThread, background: BackgroundCalibration) -> None:
        self.thread, self.background, self._last = thread, background, 0.0

    def progress(self, stage: str, fraction: float) -> None:
        now = time.monotonic()
        if now - self._last >= EMIT_INTERVAL_S:
            self._last = now
            self.thread.events.background_progress(stage, fraction)

    def done(self, upgrade: Upgrade) -> None:
        self.thread._jobs.put(_Upgrade(self.background, upgrade))


class ModelThread:
    """Runs model work on its own thread, one job at a time, in the order asked.

    Args:
        paths: the app's folders (model cache, Auto's calibration).
        events: hears how loads go.
        ready: a model already loaded and prepared (``serve``); else :meth:`load` one.
    """

    def __init__(self, paths: AppPaths, events: ModelEvents | None = None, ready: ReadyModel | None = None) -> None:
        self.paths = paths
        self.events = events or NoEvents()
        self.pools = ready.pools if ready is not None else ConversationPools()  # model thread only
        self.endings: Counter[str] = Counter()  # how the step jobs ended: finished, aborted, errored
        self._ready = ready  # touched only on the model thread
        self._model_name = ready.loaded.name if ready is not None else None
        self._jobs: queue.SimpleQueue[_Load | StepsJob | _Forget | _Upgrade | None] = queue.SimpleQueue()
        self._tokens: set[CancelToken] = set()
        self._lock = threading.Lock()
        self._background: BackgroundCalibration | None = None  # the one running, under the lock
        self._thread = threading.Thread(target=self._run, name="model-thread", daemon=True)
        self._thread.start()
        if ready is not None and ready.background is not None:
            self._start_background(ready.background)

    @property
    def model_name(self) -> str | None:
        """The loaded model's name; ``None`` while none is loaded."""
        return self._model_name

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

    def submit(self, job: StepsJob) -> None:
        """Queue a step job; it runs with the model after the jobs queued before it, and the background
        measurement waits from now until no job is left. Thread-safe, never blocks."""
        with self._lock:
            self._tokens.add(job.cancel)
            if self._background is not None:
                self._background.pause()
            self._jobs.put(job)

    @property
    def background(self) -> BackgroundCalibration | None:
        """The background calibration while it runs."""
        with self._lock:
            return self._background

    def cancel_background(self) -> None:
        """Stop the background work (the user's Cancel): Auto stays plain until the next load."""
        background = self.background
        if background is not None:
            background.cancel()

    def answer(self, request: AnswerRequest, listener: AnswerListener) -> None:
        """Queue one answer (:class:`~core.engine.answer_job.AnswerJob`); cancel ``request.cancel`` to stop it."""
        self.submit(AnswerJob(request, listener).steps_job())

    def forget(self, conversation_id: object) -> None:
        """Drop a conversation's n-gram pool (deleted, or its history was edited)."""
        self._jobs.put(_Forget(conversation_id))

    def shutdown(self, timeout: float = 1.5) -> bool:
        """Cancel everything, stop the thread; True if it ended within ``timeout`` seconds."""
        with self._lock:
            for token in self._tokens:
                token.cancel()
        return self.close(timeout)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop after the queued work (cancel it first to skip it), and the background work at once (what it
        compiled stays in the cache); True if both threads ended in time."""
        start = time.monotonic()
        stopped = self._stop_background(timeout)
        self._jobs.put(None)
        self._thread.join(max(0.0, timeout - (time.monotonic() - start)))
        return stopped and not self._thread.is_alive()

    @property
    def outstanding(self) -> int:
        """Loads and step jobs queued or running: 0 when the thread is idle and nothing is left behind."""
        with self._lock:
            return len(self._tokens)

    @property
    def pending(self) -> int:
        """Work queued and not yet started."""
        return self._jobs.qsize()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._serve(job)
            except Exception:  # a bug in a job must never stop the thread that serves the front doors
                log.exception("a model job failed")
            finally:
                with self._lock:
                    if isinstance(job, (_Load, StepsJob)):
                        self._tokens.discard(job.cancel)
                    if self._background is not None and self._jobs.empty():
                        self._background.resume()  # no answer runs or waits: the measurement goes on
        log.info("model thread stopped")

    def _serve(self, job: _Load | StepsJob | _Forget | _Upgrade) -> None:
        if isinstance(job, _Load):
            self._load(job)
        elif isinstance(job, StepsJob):
            self.endings[job.run(self._ready)] += 1
        elif isinstance(job, _Upgrade):
            self._upgrade(job)
        else:
            self.pools.forget(job.conversation_id)

    def _start_background(self, background: BackgroundCalibration) -> None:
        with self._lock:
            self._background = background
            if not self._jobs.empty():
                background.pause()  # answers wait: they go first
            background.start(_BackgroundReports(self, background))

    def _stop_background(self, timeout: float = 5.0) -> bool:
        with self._lock:
            background, self._background = self._background, None
        return background.stop(timeout) if background is not None else True

    def _upgrade(self, job: _Upgrade) -> None:
        """The background work's result, between jobs, for the model it prepared (not one loaded since)."""
        with self._lock:
            if self._background is not job.background:  # stopped for a new load or at exit: nothing to apply
                return
            self._background = None
        ready = self._ready
        if ready is None or ready.background is not job.background:
            return
        ready.upgrade(job.upgrade)
        log.info("%s", job.upgrade.message or ready.auto.reason)
        self.events.model_upgraded(ready.info, job.upgrade.message)

    def _load(self, job: _Load) -> None:
        if job.cancel.cancelled:
            return
        self._stop_background()
        previous = self._model_name
        self._release_model()
        last: list = [0.0, None]  # when, and which stage, was last reported

        def progress(stage: str, fraction: float) -> None:
            """At most every EMIT_INTERVAL_S, but a new stage and a stage's end always go through: a
            stage that is over ("Model ready") must never stay on screen while the next one runs."""
            now = time.monotonic()
            if now - last[0] >= EMIT_INTERVAL_S or fraction >= 1.0 or stage != last[1]:
                last[0], last[1] = now, stage
                self.events.load_progress(stage, fraction)

        try:
            loaded = load_model(job.source, job.options, self.paths.ensure(), progress, job.cancel)
            if loaded.name != previous:  # the pools hold the token ids of the model they served
                self.pools = ConversationPools()
            # Cancel (or a failure) during the measurement keeps the model: Auto then decodes plain.
            ready = make_ready(loaded, self.paths, self.pools, progress, job.cancel, background=True)
        except ModelError as err:
            self.events.load_failed(str(err))
            return
        except Exception as err:  # a bug or an unexpected library error must not kill the thread
            log.exception("model load failed")
            self.events.load_failed(
                f"Loading the model failed unexpectedly: {err}. Check the model files or choose another model."
            )
            return
        with self._lock:
            superseded = job.cancel.cancelled and job.cancel not in self._tokens
        if superseded:  # a newer load was queued while this one measured: it replaces this model
            return
        self._ready = ready
        self._model_name = loaded.name
        self.events.model_loaded(ready.info)
        try:  # guesses from the answers of earlier sessions too: an aid, so a failure only loses it
            ready.remember(recent_answers(self.paths.data_dir, REMEMBERED_CHARS))
        except Exception:
            log.exception("the saved answers were not added to the model's memory")
        if ready.background is not None:
            self._start_background(ready.background)

    def _release_model(self) -> None:
        if self._ready is None:
            return
        self._ready, self._model_name = None, None  # no gc.collect() on this thread: it could destroy Qt objects here
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
