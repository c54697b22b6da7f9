"""The model runner contract the server submits to: whatever owns the one model in memory.

A runner runs step jobs one at a time, first come first served. :class:`core.engine.model_thread.ModelThread`
is one, for ``lookahead-chat serve`` and, through the window's model worker, for the window too.
"""

from __future__ import annotations

from typing import Protocol

from core.engine.jobs import StepsJob


class ModelRunner(Protocol):
    """Where the server's answers run."""

    @property
    def model_name(self) -> str | None:
        """The loaded model's name (its id in the API); None while none is loaded."""

    def submit(self, job: StepsJob) -> None:
        """Queue ``job``; it runs after the jobs queued before it. Thread-safe, never blocks."""
