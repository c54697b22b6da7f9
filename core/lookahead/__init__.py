"""Lookahead decoding (Fu et al., ICML 2024): exact parallel decoding without a draft model.

Use it from transformers::

    from core.lookahead import LookaheadConfig, lookahead_generate
    out = model.generate(input_ids, max_new_tokens=128, custom_generate=lookahead_generate,
                         lookahead=LookaheadConfig(window=7, ngram=5, guesses=7))
"""

from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding, Step
from core.lookahead.generate import LookaheadGenerateOutput, lookahead_generate
from core.lookahead.memory import AnswerMemory
from core.lookahead.pool import NGramPool
from core.lookahead.sampling import SamplingConfig, TokenPolicy
from core.lookahead.stats import DecodeStats

__all__ = [
    "AnswerMemory",
    "DecodeStats",
    "Decoding",
    "LookaheadConfig",
    "LookaheadGenerateOutput",
    "NGramPool",
    "SamplingConfig",
    "Step",
    "TokenPolicy",
    "lookahead_generate",
]
