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
# (SmolLM2-135M-Instruct, int8, the tuning suites: 12 prompts with the bench's system prompt, 80 new
# tokens). They are properties of the model and the text, not of the machine: only the starting
# point, replaced by what each answer measures (AutoChooser) and by `tune`. The `cut` settings feed
# fewer tokens for nearly as many: which kind wins depends on what a token fed costs here.
PRIORS: dict[str, tuple[float, float]] = {
    "W0 N3 G1": (1.22, 1.9),
    "W0 N3 G1 cut": (1.20, 1.6),
    "W0 N4 G1": (1.27, 2.3),
    "W0 N4 G1 cut": (1.21, 1.7),
    "W0 N4 G2": (1.30, 2.9),
    "W0 N4 G2 cut": (1.24, 1.8),
    "W0 N5 G2": (1.33, 3.4),
    "W0 N5 G4": (1.34, 4.1),
    "W0 N6 G2": (1.33, 4.0),
    "W0 N6 G3": (1.34, 4.6),
    "W0 N6 G4": (1.34, 5.0),
    "W2 N3 G2": (1.30, 5.7),
    "W2 N4 G2": (1.35, 8.4),
    "W3 N3 G3": (1.37, 8.3),
    "W3 N4 G3": (1.43, 12.1),
    "W5 N4 G5": (1.53, 19.2),
    "W7 N5 G7": (1.62, 34.5),
    "W10 N5 G10": (1.66, 48.1),
    "W15 N5 G15": (1.65, 69.9),
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
    settings = [LookaheadConfig.from_label(label) for label in PRIORS]
    return settings if device_type == "cuda" else [s for s in settings if s.window <= 7]


def predict(
    curve: StepCostCurve, settings: Sequence[LookaheadConfig], learned: dict[str, tuple[float, float]] | None = None
) -> list[Estimate]:
    """Each setting's predicted speed-up over plain, best first; ``learned`` (label -> tokens per step,
    tokens fed) replaces the priors where the model's own answers have measured them."""
    estimates = []
    for s in settings:
        tps, fed = (learned or {}).get(s.label) or PRIORS.get(s.label) or _rough_prior(s)
        estimates.append(Estimate(s, tps, fed, tps / curve.relative(fed)))
    return sorted(estimates, key=lambda e: -e.speedup)


def _rough_prior(setting: LookaheadConfig) -> tuple[float, float]:
    """For a setting outside the table: a modest acceptance and a nearly full step."""
    return 1.2 + 0.03 * setting.window, 0.8 * setting.max_step_tokens
