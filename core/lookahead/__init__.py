"""Lookahead decoding (Fu et al., ICML 2024): exact parallel decoding without a draft model."""

from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding, Step
from core.lookahead.pool import NGramPool
from core.lookahead.stats import DecodeStats

__all__ = ["DecodeStats", "Decoding", "LookaheadConfig", "NGramPool", "Step"]
