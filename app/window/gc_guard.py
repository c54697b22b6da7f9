"""Garbage collection on the GUI thread only.

Python's cyclic GC runs in whichever thread happens to allocate. With a model worker thread that
allocates constantly, dead Qt widgets would often be destroyed there, and Qt crashes when a widget
dies off the GUI thread. So automatic collection is turned off and a timer on the GUI thread
collects instead, with CPython's own per-generation thresholds. Young collections take well under
a millisecond; a full one takes about 150 ms with a model loaded, so it waits until no answer is
being generated (the window must stay smooth while text streams).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


class GuiThreadCollector(QObject):
    """Disables automatic GC and collects from a GUI-thread timer; ``stop()`` restores it."""

    def __init__(
        self, busy: Callable[[], bool] = lambda: False, interval_ms: int = 500, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._busy = busy
        self._thresholds = gc.get_threshold()
        gc.disable()
        self._timer = QTimer(self, interval=interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start()

    def collect_due(self) -> int:
        """Collect the oldest generation whose count passed its threshold (a full collection only
        while not busy); returns the generation collected, or -1."""
        counts = gc.get_count()
        generation = -1
        for level in range(3 if not self._busy() else 2):
            if counts[level] <= self._thresholds[level]:
                break
            generation = level
        if generation >= 0:
            gc.collect(generation)
        return generation

    def stop(self) -> None:
        self._timer.stop()
        gc.enable()
