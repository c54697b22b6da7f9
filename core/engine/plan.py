"""How an answer decodes: plain, fixed lookahead, or Auto's chooser."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.autotune.chooser import AutoChooser
from core.autotune.prepare import AutoTuning
from core.lookahead.config import LookaheadConfig
from core.models.loader import LoadedModel
from core.settings import LookaheadSettings


@dataclass(frozen=True)
class DecodingPlan:
    """What an answer runs: a fixed setting (``None`` = plain), or Auto's chooser."""

    lookahead: LookaheadConfig | None
    chooser: AutoChooser | None = None

    @property
    def label(self) -> str:
        if self.chooser is not None:
            return "auto"
        return f"lookahead {self.lookahead.label}" if self.lookahead else "plain"

    @property
    def pool_shape(self) -> tuple[int, int] | None:
        """(N, G) of the n-gram pool the answer needs, or ``None`` if it runs plain only."""
        settings = [s for s in (self.chooser.settings if self.chooser else [self.lookahead]) if s is not None]
        if not settings:
            return None
        return max(s.ngram for s in settings), max(s.guesses for s in settings)


def decoding_plan(mode: str, settings: LookaheadSettings, loaded: LoadedModel, auto: AutoTuning) -> DecodingPlan:
    """The plan for ``mode``: Auto without a calibration (cancelled, failed) decodes plain."""
    if mode == "plain":
        return DecodingPlan(None)
    if mode == "auto":
        return DecodingPlan(None, auto.chooser)
    if not settings.auto:
        return DecodingPlan(settings.fixed)
    if auto.calibration is not None:
        return DecodingPlan(auto.calibration.best_lookahead)
    return DecodingPlan(default_lookahead(loaded.device, loaded.parameters))


def default_lookahead(device: torch.device, parameters: int) -> LookaheadConfig:
    """Lookahead mode's setting before Auto has measured the machine (calibration cancelled or failed):
    the paper's settings by model size on CUDA, a small step on the CPU."""
    if device.type == "cuda":
        if parameters < 10e9:
            return LookaheadConfig(window=15, ngram=5, guesses=15)
        if parameters < 20e9:
            return LookaheadConfig(window=10, ngram=5, guesses=10)
        return LookaheadConfig(window=7, ngram=5, guesses=7)
    return LookaheadConfig(window=5, ngram=4, guesses=5)
