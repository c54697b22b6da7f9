"""The model thread the server runs on: jobs in arrival order, no job's failure stops it."""

from __future__ import annotations

import threading

from core.engine.jobs import StepsJob
from core.progress import CancelToken


class Recorder:
    """A listener that records what it hears and signals the end."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.done = name, log, threading.Event()

    def yielded(self, steps) -> None:
        self.log.append(f"{self.name}:{len(steps)}")

    def errored(self, failure) -> None:
        self.log.append(f"{self.name} errored: {failure.message}")
        self.done.set()

    def aborted(self) -> None:
        self.log.append(f"{self.name} aborted")
        self.done.set()

    def finished(self) -> None:
        self.log.append(f"{self.name} finished")
        self.done.set()


def test_jobs_run_in_order_a_cancelled_one_is_skipped_and_a_failing_one_does_not_stop_the_thread(tiny_runner):
    log: list[str] = []
    built: list[str] = []
    gate = threading.Event()

    def steps(name: str, fail: bool = False):
        def build(ready):
            built.append(name)
            assert ready.loaded.name == tiny_runner.model_name
            if name == "first":
                gate.wait(10)  # holds the thread until the others are queued
            if fail:
                raise ValueError("bad request")
            return iter(range(3))

        return build

    names = ["first", "failing", "cancelled", "last"]
    recorders = {name: Recorder(name, log) for name in names}
    tokens = {name: CancelToken() for name in names}
    before = tiny_runner.endings.copy()
    for name in names:
        tiny_runner.submit(StepsJob(steps(name, fail=name == "failing"), recorders[name], tokens[name]))
    tokens["cancelled"].cancel()
    gate.set()
    assert recorders["last"].done.wait(30)
    assert built == ["first", "failing", "last"]
    assert log == [
        "first:3",
        "first finished",
        "failing errored: bad request",
        "cancelled aborted",
        "last:3",
        "last finished",
    ]
    assert tiny_runner.endings - before == {"finished": 2, "errored": 1, "aborted": 1}
    assert tiny_runner.pending == 0
