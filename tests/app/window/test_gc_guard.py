"""Garbage is collected by the GUI-thread timer, never by whichever thread allocates."""

from __future__ import annotations

import gc
import threading

from app.window.gc_guard import GuiThreadCollector


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_collection_happens_on_the_gui_thread_only(qtbot) -> None:
    collected_in: list[str] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            collected_in.append(threading.current_thread().name)

    collector = GuiThreadCollector(interval_ms=20)
    gc.callbacks.append(record)
    try:
        assert not gc.isenabled()
        worker = threading.Thread(target=lambda: [Cycle() for _ in range(50_000)], name="allocating-worker")
        worker.start()
        worker.join()
        assert "allocating-worker" not in collected_in
        qtbot.waitUntil(lambda: threading.main_thread().name in collected_in, timeout=2000)
        assert gc.get_count()[0] <= gc.get_threshold()[0] + 1000
    finally:
        gc.callbacks.remove(record)
        collector.stop()
    assert gc.isenabled()


def _make_every_generation_due() -> list[Cycle]:
    """Drive gc.get_count() past all three thresholds without collecting generation 2."""
    t0, t1, t2 = gc.get_threshold()
    while gc.get_count()[2] <= t2:
        gc.collect(1)
    while gc.get_count()[1] <= t1:
        gc.collect(0)
    return [Cycle() for _ in range(t0 + 1)]  # kept alive: counts as new allocations


def test_full_collections_wait_while_busy(qtbot) -> None:
    busy = [True]
    collector = GuiThreadCollector(busy=lambda: busy[0], interval_ms=10_000)
    try:
        alive = _make_every_generation_due()
        assert collector.collect_due() == 1
        busy[0] = False
        alive += _make_every_generation_due()
        assert collector.collect_due() == 2
    finally:
        collector.stop()
