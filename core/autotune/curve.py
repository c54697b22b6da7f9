"""The step cost curve: what one forward pass costs as the tokens it feeds grow, on this machine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCostCurve:
    """Seconds of one forward pass feeding ``sizes[i]`` new tokens after a few hundred cached ones."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    @classmethod
    def monotone(cls, sizes: Sequence[int], seconds: Sequence[float]) -> StepCostCurve:
        """A curve from measured times, made non-decreasing: feeding more tokens is never cheaper, so
        a narrow step measured slower than a wider one was slowed by the machine (another program
        competing), and takes the wider step's time. Lowering, never raising, keeps the relative
        cost of wide steps from being underestimated."""
        fixed = list(seconds)
        for i in range(len(fixed) - 2, -1, -1):
            fixed[i] = min(fixed[i], fixed[i + 1])
        return cls(tuple(sizes), tuple(fixed))

    def cost(self, size: float) -> float:
        """Seconds at ``size`` tokens: linear between measured sizes, extended past the last two."""
        sizes, seconds = self.sizes, self.seconds
        if size <= sizes[0] or len(sizes) == 1:
            return seconds[0]
        for (s0, t0), (s1, t1) in zip(zip(sizes, seconds), zip(sizes[1:], seconds[1:])):
            if size <= s1:
                return t0 + (t1 - t0) * (size - s0) / (s1 - s0)
        (s0, t0), (s1, t1) = (sizes[-2], seconds[-2]), (sizes[-1], seconds[-1])
        return t1 + max(t1 - t0, 0.0) * (size - s1) / (s1 - s0)

    def relative(self, size: float) -> float:
        """Cost at ``size`` tokens over the cost of a one-token step."""
        return self.cost(size) / self.seconds[0]

    def summary(self) -> str:
        """The wider steps' cost in one-token steps, for people (``steps of 2/4/... tokens cost r2/r4/...x one``):
        what decides whether lookahead pays here. Empty for a curve of one size."""
        wider = [(size, seconds / self.seconds[0]) for size, seconds in zip(self.sizes, self.seconds) if size > 1]
        if not wider:
            return ""
        sizes = "/".join(str(size) for size, _ in wider)
        costs = "/".join(f"{ratio:.2f}" for _, ratio in wider)
        return f"steps of {sizes} tokens cost {costs}x one"

    def as_dict(self) -> dict[str, list]:
        return {"sizes": list(self.sizes), "seconds": list(self.seconds)}

    @classmethod
    def from_dict(cls, data: dict) -> StepCostCurve:
        sizes, seconds = tuple(int(s) for s in data["sizes"]), tuple(float(s) for s in data["seconds"])
        if not sizes or len(sizes) != len(seconds) or min(seconds) <= 0:
            raise ValueError("a step cost curve needs matching, positive sizes and seconds")
        return cls(sizes, seconds)
