"""Progress reporting and cancellation shared by long operations (loads, downloads, benchmarks)."""

from __future__ import annotations

import threading
from collections.abc import Callable

ProgressCallback = Callable[[str, float], None]
"""Called with a stage description and the fraction done (0..1)."""


class CancelToken:
    """A thread-safe flag a long operation polls between units of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


def no_progress(stage: str, fraction: float) -> None:
    """A progress callback that ignores its reports."""


class Cancelled(Exception):
    """A long operation stopped because its cancel token was set (another model loads, or the user pressed Cancel)."""
