"""The job runner contract: batches, exactly one ending, the same error path for building and stepping, cancel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from core.engine.jobs import NO_MODEL, OOM_ADVICE, JobFailure, StepsJob, Throttle, describe_failure, run_steps
from core.progress import CancelToken


class Recorder:
    """A listener that keeps what it heard, in order."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, object]] = []

    def yielded(self, steps: list) -> None:
        self.heard.append(("yielded", list(steps)))

    def errored(self, failure: JobFailure) -> None:
        self.heard.append(("errored", failure))

    def aborted(self) -> None:
        self.heard.append(("aborted", None))

    def finished(self) -> None:
        self.heard.append(("finished", None))

    @property
    def steps(self) -> list:
        return [s for kind, batch in self.heard if kind == "yielded" for s in batch]

    @property
    def endings(self) -> list[str]:
        return [kind for kind, _ in self.heard if kind != "yielded"]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_steps_come_in_throttled_batches_and_all_arrive_before_the_end() -> None:
    clock = Clock()

    def steps() -> Iterator[int]:
        for i in range(10):
            clock.now += 0.04  # a step every 40 ms: a batch goes out every third step at 0.1 s
            yield i

    listener = Recorder()
    assert run_steps(steps(), listener, CancelToken(), throttle=Throttle(0.1, clock=clock)) == "finished"
    assert listener.steps == list(range(10)) and listener.endings == ["finished"]
    sizes = [len(batch) for kind, batch in listener.heard if kind == "yielded"]
    assert sizes == [3, 3, 3, 1]


def test_urgent_steps_go_out_at_once() -> None:
    listener = Recorder()
    throttle = Throttle(3600.0, urgent=lambda s: s == "start", clock=Clock())
    run_steps(iter(["a", "start", "b", "c"]), listener, CancelToken(), throttle=throttle)
    assert listener.heard == [("yielded", ["a", "start"]), ("yielded", ["b", "c"]), ("finished", None)]


@pytest.mark.parametrize("where", ["building", "stepping"])
@pytest.mark.parametrize("error", [KeyError("seed"), TypeError("manual_seed expected an int"), RecursionError("deep")])
def test_any_failure_ends_the_job_with_one_message(where: str, error: Exception) -> None:
    def build() -> Iterator[int]:
        if where == "building":
            raise error

        def steps() -> Iterator[int]:
            yield 1
            raise error

        return steps()

    listener = Recorder()
    assert run_steps(build, listener, CancelToken(), throttle=Throttle(3600.0), what="The answer") == "errored"
    assert listener.endings == ["errored"]
    failure = listener.heard[-1][1]
    assert failure.kind == "unexpected" and type(error).__name__ in failure.message
    assert (
        failure.message.startswith("The answer stopped because of an error")
        and "choose another model" in failure.message
    )
    assert listener.steps == ([1] if where == "stepping" else [])  # what came before the failure is kept


def test_out_of_memory_gets_the_same_advice_for_every_job() -> None:
    for what in ("The answer", "The comparison"):
        failure = describe_failure(torch.OutOfMemoryError("CUDA out of memory"), what)
        assert failure == JobFailure("out-of-memory", f"{what} stopped: {OOM_ADVICE}")
    assert describe_failure(ValueError("Shorten the message.")) == JobFailure("explained", "Shorten the message.")


def test_cancel_stops_asking_for_steps_and_closes_the_iterator() -> None:
    cancel = CancelToken()
    closed: list[bool] = []

    def steps() -> Iterator[int]:
        try:
            for i in range(100):
                if i == 3:
                    cancel.cancel()  # as Stop pressed while step 3 runs
                yield i
        finally:
            closed.append(True)

    listener = Recorder()
    assert run_steps(steps(), listener, cancel, throttle=Throttle(3600.0)) == "aborted"
    assert listener.steps == [0, 1, 2, 3] and listener.endings == ["aborted"] and closed == [True]


def test_a_job_cancelled_before_it_starts_is_never_built() -> None:
    cancel = CancelToken()
    cancel.cancel()
    built: list[bool] = []
    listener = Recorder()
    assert run_steps(lambda: built.append(True) or iter([1]), listener, cancel) == "aborted"
    assert built == [] and listener.heard == [("aborted", None)]


def test_a_steps_job_without_a_model_says_what_to_do() -> None:
    listener = Recorder()
    assert StepsJob(lambda loaded: iter([loaded]), listener, CancelToken()).run(None) == "errored"
    assert listener.heard == [("errored", JobFailure("explained", NO_MODEL))]
    listener = Recorder()
    assert StepsJob(lambda loaded: iter([loaded]), listener, CancelToken()).run("model") == "finished"
    assert listener.steps == ["model"]


def test_a_failing_listener_does_not_escape() -> None:
    class Broken(Recorder):
        def finished(self) -> None:
            raise RuntimeError("slot failed")

    assert run_steps(iter([1]), Broken(), CancelToken()) == "finished"
