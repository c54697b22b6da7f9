"""Summary of a comparison: medians and spreads over repeats, speed-up, identical outputs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from core.compare.record import Comparison, RunRecord


@dataclass(frozen=True)
class Spread:
    """Median and range of one measure over the repeats."""

    median: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one value")
        return cls(statistics.median(values), min(values), max(values), len(values))

    @property
    def relative(self) -> float:
        """(high - low) / median: 0.05 means the repeats spread over 5% of the median."""
        return (self.high - self.low) / self.median if self.median else 0.0


@dataclass(frozen=True)
class ModeSummary:
    """One decoding mode over its runs."""

    tokens_per_second: Spread
    time_to_first_token: Spread
    tokens_per_step: float
    steps: int
    new_tokens: int

    @classmethod
    def of(cls, runs: Sequence[RunRecord]) -> ModeSummary:
        stats = [r.stats for r in runs]
        return cls(
            Spread.of([s.tokens_per_second for s in stats]),
            Spread.of([s.time_to_first_token for s in stats]),
            statistics.median(s.tokens_per_step for s in stats),
            int(statistics.median_low(s.steps for s in stats)),
            int(statistics.median_low(s.new_tokens for s in stats)),
        )


@dataclass(frozen=True)
class Summary:
    """What the summary strip shows.

    ``speedup`` is lookahead tokens/s over plain tokens/s per repeat; ``identical`` is true when
    every repeat's two outputs match token for token; ``first_difference`` is the index of the
    first differing token otherwise.
    """

    repeats: int
    plain: ModeSummary
    lookahead: ModeSummary
    speedup: Spread
    identical: bool
    first_difference: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(comparison: Comparison) -> Summary | None:
    """The summary over the repeats where both runs finished; ``None`` if there is none."""
    pairs = comparison.pairs()
    if not pairs:
        return None
    first_difference = next((d for p, a in pairs if (d := first_difference_of(p.tokens, a.tokens)) is not None), None)
    return Summary(
        repeats=len(pairs),
        plain=ModeSummary.of([p for p, _ in pairs]),
        lookahead=ModeSummary.of([a for _, a in pairs]),
        speedup=Spread.of([_ratio(a, p) for p, a in pairs]),
        identical=first_difference is None,
        first_difference=first_difference,
    )


def first_difference_of(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where the token lists differ (a length difference counts)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _ratio(ahead: RunRecord, plain: RunRecord) -> float:
    base = plain.stats.tokens_per_second
    return ahead.stats.tokens_per_second / base if base > 0 else 0.0
