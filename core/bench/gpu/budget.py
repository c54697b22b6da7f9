"""A wall-clock budget shared by the check's sections: each section gets a share, items skip when it is spent."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    """The check's total time, counted from construction."""

    total_seconds: float
    _start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def left(self) -> float:
        return self.total_seconds - self.elapsed()

    def section(self, share: float) -> Deadline:
        """A deadline ``share`` of the total budget from now, never past the end of the budget."""
        return Deadline(time.perf_counter() + min(share * self.total_seconds, max(self.left(), 0.0)))


@dataclass(frozen=True)
class Deadline:
    """When a section must stop starting new items."""

    at: float

    def left(self) -> float:
        return self.at - time.perf_counter()

    def allows(self, estimate_seconds: float) -> bool:
        """True when an item expected to take ``estimate_seconds`` still fits."""
        return self.left() >= estimate_seconds
