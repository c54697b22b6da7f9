"""What a comparison recorded: each run's tokens, text and per-step timings, and the settings used."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.lookahead.stats import DecodeStats

PLAIN = "plain"
LOOKAHEAD = "lookahead"
FORMAT_VERSION = 1


@dataclass
class RunRecord:
    """One measured generation.

    ``position`` is 0 when the run went first in its repeat, 1 when second. ``step_tokens[0]`` and
    ``step_seconds[0]`` are the prefill's (which emits the first token).
    """

    mode: str
    repeat: int
    position: int
    tokens: list[int]
    text: str
    finish_reason: str | None
    step_seconds: list[float]
    step_tokens: list[int]

    @property
    def stats(self) -> DecodeStats:
        """The run's statistics, rebuilt from its steps."""
        stats = DecodeStats(mode=self.mode)
        for i, (tokens, seconds) in enumerate(zip(self.step_tokens, self.step_seconds)):
            stats.record(tokens, seconds, prefill=i == 0)
        return stats

    def timeline(self) -> list[tuple[float, float]]:
        """(elapsed seconds, tokens so far) after each step, starting at (0, 0)."""
        points = [(0.0, 0.0)]
        elapsed, total = 0.0, 0.0
        for tokens, seconds in zip(self.step_tokens, self.step_seconds):
            elapsed += seconds
            total += tokens
            points.append((elapsed, total))
        return points

    def to_json(self) -> dict[str, Any]:
        stats = self.stats
        return asdict(self) | {
            "new_tokens": stats.new_tokens,
            "steps": stats.steps,
            "tokens_per_second": stats.tokens_per_second,
            "tokens_per_step": stats.tokens_per_step,
            "time_to_first_token": stats.time_to_first_token,
            "total_seconds": stats.total_seconds,
            "accepted_histogram": {str(k): v for k, v in sorted(stats.accepted_histogram.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        return cls(
            mode=str(data["mode"]),
            repeat=int(data["repeat"]),
            position=int(data["position"]),
            tokens=[int(t) for t in data["tokens"]],
            text=str(data["text"]),
            finish_reason=data.get("finish_reason"),
            step_seconds=[float(s) for s in data["step_seconds"]],
            step_tokens=[int(t) for t in data["step_tokens"]],
        )


@dataclass
class Comparison:
    """A finished (or stopped) comparison and what it ran on."""

    id: str
    created: str  # ISO 8601, local time
    prompt: str
    system_prompt: str
    model: str
    device: str
    dtype: str
    lookahead: str  # the config's label, e.g. "W4 N4 G4"
    max_new_tokens: int
    repeats: int
    conversation_id: str | None = None
    cancelled: bool = False
    runs: list[RunRecord] = field(default_factory=list)

    def runs_of(self, mode: str) -> list[RunRecord]:
        return [r for r in self.runs if r.mode == mode]

    def pairs(self) -> list[tuple[RunRecord, RunRecord]]:
        """(plain, lookahead) of every repeat where both runs finished."""
        plain = {r.repeat: r for r in self.runs_of(PLAIN)}
        ahead = {r.repeat: r for r in self.runs_of(LOOKAHEAD)}
        return [(plain[i], ahead[i]) for i in sorted(plain.keys() & ahead.keys())]

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"format": FORMAT_VERSION, "runs": [r.to_json() for r in self.runs]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comparison:
        """Parse a stored comparison; raises ValueError when the data is not one."""
        try:
            return cls(
                id=str(data["id"]),
                created=str(data["created"]),
                prompt=str(data["prompt"]),
                system_prompt=str(data.get("system_prompt", "")),
                model=str(data["model"]),
                device=str(data["device"]),
                dtype=str(data["dtype"]),
                lookahead=str(data["lookahead"]),
                max_new_tokens=int(data["max_new_tokens"]),
                repeats=int(data["repeats"]),
                conversation_id=data.get("conversation_id"),
                cancelled=bool(data.get("cancelled", False)),
                runs=[RunRecord.from_json(r) for r in data["runs"]],
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a comparison file ({err!r})") from err
