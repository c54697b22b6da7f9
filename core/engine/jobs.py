"""The job runner contract: drive any step iterator with one throttle, one error path, one cancel rule.

A chat answer, a comparison run and a suite run are each an iterator of steps. :func:`run_steps`
drives one off the GUI thread and reports to a :class:`JobListener` in the shape of superqt's
``GeneratorWorker``: ``yielded`` (steps in batches, at most once per :data:`EMIT_INTERVAL_S`),
then exactly one of ``errored``, ``aborted`` or ``finished``. No Qt here: the window adapts a
listener to Qt signals (``app/bridge/signals.py``); the command line and a local server can use it
as is.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from core.models.errors import ModelError
from core.progress import CancelToken

log = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

EMIT_INTERVAL_S = 0.1
"""Steps reach the listener at most 10 times a second: GUI work competes with decoding for the CPU."""

OOM_ADVICE = (
    "the device ran out of memory. Use a smaller lookahead window (lower W and G, or plain mode), "
    "fewer new tokens, or load the model in 4-bit (Settings, Model, Quantization)."
)

NO_MODEL = "No model is loaded. Wait for the model to load, or choose one in Settings."


class JobInputError(ValueError):
    """The request cannot be served as asked (no model, an empty prompt); the message says what to change."""


@dataclass(frozen=True)
class JobFailure:
    """Why a job ended early, said for the user: ``kind`` is out-of-memory, explained (our own
    error, whose message already says what to do) or unexpected."""

    kind: str
    message: str


def describe_failure(err: BaseException, what: str = "The job") -> JobFailure:
    """The one place that turns an exception into what the user reads (the same advice everywhere).

    ``what`` names the job in the message, e.g. "The answer" or "The comparison".
    """
    if _is_out_of_memory(err):
        return JobFailure("out-of-memory", f"{what} stopped: {OOM_ADVICE}")
    if isinstance(err, (ValueError, ModelError)):  # our own checks say what happened and what to change
        return JobFailure("explained", str(err))
    detail = str(err).strip() or "no details"
    return JobFailure(
        "unexpected",
        f"{what} stopped because of an error ({type(err).__name__}: {detail}). Try again; if it happens again, "
        "check the settings (sampling, seed) or choose another model in Settings.",
    )


def _is_out_of_memory(err: BaseException) -> bool:
    torch = sys.modules.get("torch")  # no torch import just to classify an error
    if torch is not None and isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, MemoryError)


class JobListener(Protocol[T_contra]):
    """What :func:`run_steps` reports to; exactly one of the last three is called, once."""

    def yielded(self, steps: list[T_contra]) -> None: ...

    def errored(self, failure: JobFailure) -> None: ...

    def aborted(self) -> None: ...

    def finished(self) -> None: ...


def _never(_step: object) -> bool:
    return False


@dataclass
class Throttle(Generic[T]):
    """Batches steps: a batch goes out when ``interval`` has passed since the last one, or at once
    for a step ``urgent`` says may not wait (a comparison run starting or ending)."""

    interval: float = EMIT_INTERVAL_S
    urgent: Callable[[T], bool] = _never
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.pending: list[T] = []
        self._last = self.clock()

    def add(self, step: T) -> list[T] | None:
        """Queue ``step``; the batch to send now, if any."""
        self.pending.append(step)
        now = self.clock()
        if self.urgent(step) or now - self._last >= self.interval:
            self._last = now
            return self.take()
        return None

    def take(self) -> list[T]:
        """Everything queued (maybe nothing), emptying the queue."""
        batch, self.pending = self.pending, []
        return batch


@dataclass(frozen=True)
class StepsJob(Generic[T]):
    """Model work as a model thread takes it: ``build(ready model)`` gives the step iterator, run on that thread.

    ``urgent`` marks steps that may not wait for the throttle; ``what`` names the job in messages;
    ``needs_model`` False: a job that runs without the local model (a remote answer), so it need not
    wait behind a load on the model thread.
    """

    build: Callable[[Any], Iterable[T]]
    listener: JobListener[T]
    cancel: CancelToken
    what: str = "The job"
    urgent: Callable[[T], bool] = _never
    needs_model: bool = True

    def run(self, ready: Any) -> str:
        """Run with ``ready`` (a :class:`~core.engine.ready.ReadyModel`; None when no model is loaded: the job
        fails with advice); see :func:`run_steps`."""

        def steps() -> Iterable[T]:
            if ready is None and self.needs_model:
                raise JobInputError(NO_MODEL)
            return self.build(ready)

        return run_steps(steps, self.listener, self.cancel, throttle=Throttle(urgent=self.urgent), what=self.what)


def run_steps(
    steps: Callable[[], Iterable[T]] | Iterable[T],
    listener: JobListener[T],
    cancel: CancelToken,
    *,
    throttle: Throttle[T] | None = None,
    what: str = "The job",
) -> str:
    """Drive ``steps`` to its end; return how it ended: "finished", "aborted" or "errored".

    ``steps`` may be a callable that builds the iterator: a failure while building it (a chat
    template that raises, a bad seed) takes the same error path as one in the middle. Cancel rule:
    the token is checked before every step; once it is set no further step is asked for, the
    iterator is closed, and the listener hears ``aborted`` (an iterator that sees the token itself
    and ends early counts as aborted too). Steps queued by the throttle are always delivered before
    the ending. Never raises for the job's own failures (any ``Exception``).
    """
    throttle = throttle or Throttle()
    iterator = None
    ending = "finished"
    failure: JobFailure | None = None
    try:
        if cancel.cancelled:
            ending = "aborted"
        else:
            iterator = iter(steps() if callable(steps) else steps)
            while True:
                if cancel.cancelled:
                    ending = "aborted"
                    break
                try:
                    step = next(iterator)
                except StopIteration:
                    break
                batch = throttle.add(step)
                if batch:
                    listener.yielded(batch)
            if cancel.cancelled:
                ending = "aborted"
    except Exception as err:  # every failure of the job ends the job, never the thread serving it
        log.warning("%s failed", what, exc_info=not isinstance(err, ValueError))
        failure, ending = describe_failure(err, what), "errored"
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                log.exception("closing the steps of %s failed", what)
    return _end(listener, throttle, ending, failure)


def _end(listener: JobListener[T], throttle: Throttle[T], ending: str, failure: JobFailure | None) -> str:
    """Deliver what is queued and the ending; a listener's own failure is logged, not raised."""
    try:
        batch = throttle.take()
        if batch:
            listener.yielded(batch)
        if failure is not None:
            listener.errored(failure)
        elif ending == "aborted":
            listener.aborted()
        else:
            listener.finished()
    except Exception:
        log.exception("reporting the end of a job failed")
    return ending
