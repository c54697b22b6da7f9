"""Greedy lookahead against plain greedy decoding on one model: identical tokens, or where they part.

A random model of a real shape rarely repeats itself, so lookahead's own guesses are seldom
accepted and a fresh pool mostly tests the one-token path. Each setting therefore also runs with
a pool seeded with plain decoding's own output: then most steps accept N-1 guessed tokens, and
verification and the KV-cache compaction are exercised on every step; the output must still be
plain decoding's, token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from core.lookahead import Decoding, LookaheadConfig, NGramPool

POOLS = ("fresh", "seeded")


@dataclass
class Divergence:
    """Where a lookahead output first differs from plain, and how close plain's top two logits were there."""

    prompt: int
    position: int
    plain_token: int
    lookahead_token: int
    top2_margin: float  # plain's logit gap between its best and second-best token at that position


@dataclass
class ExactnessResult:
    """One (dtype, setting) over several prompts."""

    dtype: str
    config: str
    pool: str  # "fresh", or "seeded" with plain decoding's output
    prompts: int
    identical: int
    new_tokens: int
    tokens_per_step: float
    distinct_tokens: int  # over all plain outputs: shows the random model does not just repeat one token
    divergences: list[Divergence] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def random_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """Seeded random token prompts (ids from 10 up, clear of the usual special tokens)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(10, vocab, (length,), generator=generator).tolist() for _ in range(count)]


def compare(
    model: Any, dtype_name: str, prompts: Sequence[list[int]], configs: Sequence[LookaheadConfig], max_new_tokens: int
) -> list[ExactnessResult]:
    """Decode every prompt plainly once and with each config; count identical outputs."""
    plain = []
    for ids in prompts:
        decoding = Decoding(model, ids, max_new_tokens=max_new_tokens)
        list(decoding)
        plain.append(decoding.tokens)
    distinct = len({t for tokens in plain for t in tokens})
    results = []
    for config in configs:
        for pool_kind in POOLS:
            results.append(_run_setting(model, dtype_name, prompts, plain, config, pool_kind, max_new_tokens, distinct))
    return results


def _run_setting(
    model: Any,
    dtype_name: str,
    prompts: Sequence[list[int]],
    plain: list[list[int]],
    config: LookaheadConfig,
    pool_kind: str,
    max_new_tokens: int,
    distinct: int,
) -> ExactnessResult:
    result = ExactnessResult(dtype_name, config.label, pool_kind, len(prompts), 0, 0, 0.0, distinct)
    steps = 0
    for index, ids in enumerate(prompts):
        pool = NGramPool(config.ngram, config.guesses)
        if pool_kind == "seeded":
            pool.add_sequence(ids[-(config.ngram - 1) :] + plain[index])
        decoding = Decoding(model, ids, lookahead=config, max_new_tokens=max_new_tokens, pool=pool)
        list(decoding)
        steps += decoding.stats.steps
        result.new_tokens += len(decoding.tokens)
        if decoding.tokens == plain[index]:
            result.identical += 1
        else:
            result.divergences.append(_divergence(model, index, ids, plain[index], decoding.tokens))
    result.tokens_per_step = result.new_tokens / steps if steps else 0.0
    return result


def _divergence(model: Any, index: int, prompt: list[int], plain: list[int], other: list[int]) -> Divergence:
    position = next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), min(len(plain), len(other)))
    ids = torch.tensor([prompt + plain[:position]], device=model.device)
    with torch.inference_mode():
        logits = model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return Divergence(
        prompt=index,
        position=position,
        plain_token=plain[position] if position < len(plain) else -1,
        lookahead_token=other[position] if position < len(other) else -1,
        top2_margin=float(top[0] - top[1]),
    )
