"""Default lookahead parameters per device and model size, from measurements (README, 'Defaults')."""

from __future__ import annotations

import torch

from core.lookahead.config import LookaheadConfig


def default_lookahead(device: torch.device, parameters: int) -> LookaheadConfig:
    """The measured fallback used by 'Auto' when no tuned profile exists.

    On CUDA the paper's settings by model size (a wide step costs about as much as a narrow
    one); on the CPU a small step, since the step cost grows with its token count there.
    """
    if device.type == "cuda":
        if parameters < 10e9:
            return LookaheadConfig(window=15, ngram=5, guesses=15)
        if parameters < 20e9:
            return LookaheadConfig(window=10, ngram=5, guesses=10)
        return LookaheadConfig(window=7, ngram=5, guesses=7)
    return LookaheadConfig(window=5, ngram=4, guesses=5)
