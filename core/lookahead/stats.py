"""Decoding statistics: steps, tokens per step, accepted lengths, rates, per-step times."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class DecodeStats:
    """What one generation did and how fast.

    ``steps`` counts forward passes, the prefill included; ``step_tokens[i]`` is how many tokens
    step i emitted (the prefill emits the first token). Times are device-synchronised.
    """

    mode: str
    prompt_tokens: int = 0
    steps: int = 0
    new_tokens: int = 0
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    accepted_histogram: Counter[int] = field(default_factory=Counter)
    prefill_seconds: float = 0.0
    fed_tokens: int = 0  # tokens fed to the model by the steps after the prefill
    setting_steps: Counter[str] = field(default_factory=Counter)  # steps after the prefill, by setting
    setting_tokens: Counter[str] = field(default_factory=Counter)  # tokens those steps emitted

    def record(self, tokens: int, seconds: float, *, prefill: bool = False, setting: str | None = None) -> None:
        """Count one step; ``setting`` names what ran (``plain``, ``W7 N5 G7``, ...)."""
        self.steps += 1
        self.new_tokens += tokens
        self.step_seconds.append(seconds)
        self.step_tokens.append(tokens)
        if prefill:
            self.prefill_seconds = seconds
        else:
            self.accepted_histogram[tokens] += 1
        if setting is not None:
            self.setting_steps[setting] += 1
            self.setting_tokens[setting] += tokens

    @property
    def total_seconds(self) -> float:
        return sum(self.step_seconds)

    @property
    def time_to_first_token(self) -> float:
        return self.prefill_seconds

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        """New tokens per second over the whole generation, prefill included."""
        return self.new_tokens / self.total_seconds if self.total_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "prompt_tokens": self.prompt_tokens,
            "steps": self.steps,
            "new_tokens": self.new_tokens,
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_second": self.tokens_per_second,
            "time_to_first_token": self.time_to_first_token,
            "total_seconds": self.total_seconds,
            "step_seconds": list(self.step_seconds),
            "step_tokens": list(self.step_tokens),
            "accepted_histogram": {str(k): v for k, v in sorted(self.accepted_histogram.items())},
            "settings": {
                name: {"steps": self.setting_steps[name], "tokens": self.setting_tokens[name]}
                for name in self.setting_steps
            },
        }

    @property
    def settings_summary(self) -> str:
        """Which settings ran and for how many tokens, most tokens first: ``W5 N4 G5 180, plain 20``."""
        return ", ".join(f"{name} {count}" for name, count in self.setting_tokens.most_common())
