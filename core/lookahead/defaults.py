"""Lookahead parameters for lookahead mode before Auto has measured the machine (calibration cancelled)."""

from __future__ import annotations

import torch

from core.lookahead.config import LookaheadConfig


def default_lookahead(device: torch.device, parameters: int) -> LookaheadConfig:
    """The paper's settings by model size on CUDA; a small step on the CPU.

    Only lookahead mode uses it, and only until the calibration has measured this machine.
    """
    if device.type == "cuda":
        if parameters < 10e9:
            return LookaheadConfig(window=15, ngram=5, guesses=15)
        if parameters < 20e9:
            return LookaheadConfig(window=10, ngram=5, guesses=10)
        return LookaheadConfig(window=7, ngram=5, guesses=7)
    return LookaheadConfig(window=5, ngram=4, guesses=5)
