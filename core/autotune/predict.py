"""Predicting each lookahead setting's speed on this machine: tokens per step over its step's relative cost.

Tokens per step are properties of the model and the text, not of the machine: they start from
priors and are replaced by what the answers measure (:class:`~core.autotune.chooser.AutoChooser`)
and by ``tune``. The step's cost is the machine's (:class:`~core.autotune.curve.StepCostCurve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.autotune.curve import StepCostCurve
from core.lookahead.config import LookaheadConfig

# Tokens per step and tokens fed per step of each setting, greedy on the default model
# (SmolLM2-135M-Instruct, bf16, the tuning suites: 12 prompts with the bench's system prompt, 80 new
# tokens). They are properties of the model and the text, not of the machine: only the starting
# point, replaced by what each answer measures (AutoChooser) and by `tune`.
PRIORS: dict[tuple[int, int, int], tuple[float, float]] = {
    (0, 3, 1): (1.18, 1.9),
    (0, 4, 1): (1.21, 2.3),
    (0, 4, 2): (1.25, 2.8),
    (0, 5, 2): (1.25, 3.5),
    (0, 5, 4): (1.28, 4.2),
    (0, 6, 2): (1.27, 4.0),
    (0, 6, 3): (1.28, 4.6),
    (0, 6, 4): (1.27, 4.9),
    (2, 3, 2): (1.31, 5.7),
    (2, 4, 2): (1.30, 8.3),
    (3, 3, 3): (1.37, 8.2),
    (3, 4, 3): (1.36, 12.1),
    (5, 4, 5): (1.50, 19.1),
    (7, 5, 7): (1.59, 34.5),
    (10, 5, 10): (1.63, 47.8),
    (15, 5, 15): (1.70, 69.7),
}
START_MARGIN = 1.05  # a setting must be predicted this much faster than plain to be tried first
KEEP_RATIO = 0.95  # settings predicted below this fraction of plain's speed are never run
PRIOR_STEPS = 8  # how many measured steps a prediction of tokens per step is worth


@dataclass(frozen=True)
class Estimate:
    """A setting's predicted speed: its tokens per step over the relative cost of its step."""

    setting: LookaheadConfig | None
    tokens_per_step: float
    fed_tokens: float
    speedup: float  # predicted, over plain decoding on the same machine

    @property
    def label(self) -> str:
        return self.setting.label if self.setting is not None else "plain"


def grid(device_type: str) -> list[LookaheadConfig]:
    """The settings Auto considers: verification only (W=0) and lookahead windows up to the paper's."""
    settings = [LookaheadConfig(w, n, g) for (w, n, g) in PRIORS]
    return settings if device_type == "cuda" else [s for s in settings if s.window <= 7]


def predict(
    curve: StepCostCurve, settings: Sequence[LookaheadConfig], learned: dict[str, tuple[float, float]] | None = None
) -> list[Estimate]:
    """Each setting's predicted speed-up over plain, best first; ``learned`` (label -> tokens per step,
    tokens fed) replaces the priors where the model's own answers have measured them."""
    estimates = []
    for s in settings:
        tps, fed = (learned or {}).get(s.label) or PRIORS.get((s.window, s.ngram, s.guesses)) or _rough_prior(s)
        estimates.append(Estimate(s, tps, fed, tps / curve.relative(fed)))
    return sorted(estimates, key=lambda e: -e.speedup)


def _rough_prior(setting: LookaheadConfig) -> tuple[float, float]:
    """For a setting outside the table: a modest acceptance and a nearly full step."""
    return 1.2 + 0.03 * setting.window, 0.8 * setting.max_step_tokens
