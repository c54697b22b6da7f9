"""Target distributions and verification beyond plain argmax: logits processors and sampling.

Drafts (pool candidates) are deterministic, so a draft token t at a position is accepted with
probability p(t) under the target distribution p there; on rejection p(t) is set to 0 and p is
renormalised before the next distinct draft token is tried; if all are rejected the token is
sampled from that residual. This keeps exactly the output distribution of plain sampling.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from core.lookahead.verify import verify_greedy
from core.runtime.step import argmax

RANKED_MARGIN = 1e-5
"""Relative difference below which two penalised scores count as close: far more than their rounding
(computed here in double precision, by the processor in fp32)."""

MIN_TEMPERATURE = 1e-3
"""The lowest sampling temperature: lower ones choose as greedy decoding does (their limit), where dividing
the logits by them would overflow to infinities that no probability can be made of."""


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters, applied in this order: repetition penalty, temperature, top-k, top-p, min-p."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= MIN_TEMPERATURE:
            raise ValueError(
                f"temperature must be at least {MIN_TEMPERATURE} for sampling (use greedy decoding below)."
            )
        if self.top_k < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p < 1 or self.repetition_penalty <= 0:
            raise ValueError(
                "invalid sampling parameters: need top_k >= 0, 0 < top_p <= 1, 0 <= min_p < 1, repetition_penalty > 0."
            )

    def processors(self) -> Any:
        """The equivalent transformers LogitsProcessorList."""
        chain = LogitsProcessorList()
        if self.repetition_penalty != 1.0:
            chain.append(RepetitionPenalty(self.repetition_penalty))
        if self.temperature != 1.0:
            chain.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k > 0:
            chain.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            chain.append(TopPLogitsWarper(self.top_p))
        if self.min_p > 0.0:
            chain.append(MinPLogitsWarper(self.min_p))
        return chain


class RepetitionPenalty(RepetitionPenaltyLogitsProcessor):
    """transformers' repetition penalty, the same numbers at a fraction of the time: it copies each row once,
    where transformers' copies it twice (padded, then scattered into). Decoding processes a row every token
    (and lookahead one per token it verifies), so the copies cost whole percents of a small model's step."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(1)
        vocab = scores.shape[-1]
        # 3-D scores (transformers' continuous batching), or ids the head cannot produce: transformers' own way
        if scores.dim() != 2 or (input_ids.numel() and int(input_ids.max()) >= vocab):
            return super().__call__(input_ids, scores)
        score = torch.gather(scores, 1, input_ids)
        score = torch.where(score < 0, score * self.penalty, score / self.penalty)
        return scores.scatter(1, input_ids, score)


class TokenPolicy:
    """How the next token is chosen from a logits row: processed argmax, or a sample.

    Args:
        processors: a transformers LogitsProcessorList (may be empty).
        do_sample: sample instead of taking the argmax.
        generator: the random source for sampling (seed it for reproducible runs).
    """

    def __init__(self, processors: Any, do_sample: bool, generator: torch.Generator | None = None) -> None:
        self.processors = processors
        self.do_sample = do_sample
        self.generator = generator
        # Processors that take only (ids, scores) are called one by one: a LogitsProcessorList inspects each
        # one's signature on every call, which costs more than a small model's repetition penalty itself.
        self._chain: list[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] | None = (
            list(processors) if all(_plain_processor(p) for p in processors) else None
        )
        # A repetition penalty of at least 1, alone and greedy, only lowers the scores of tokens already in the
        # text: where the raw argmax is a token not in it, it is the processed argmax too (and a NaN, the first
        # NaN either way). Then the row needs no processing (a handful of tensor operations a row).
        only = list(processors)
        self.keeps_unseen_argmax = (
            not do_sample
            and len(only) == 1
            and isinstance(only[0], RepetitionPenaltyLogitsProcessor)
            and float(only[0].penalty) >= 1.0
        )
        self._penalty = float(only[0].penalty) if self.keeps_unseen_argmax else 1.0

    @classmethod
    def from_config(cls, config: SamplingConfig, device: torch.device) -> TokenPolicy:
        generator = torch.Generator(device=device)
        if config.seed is not None:
            generator.manual_seed(config.seed)
        else:
            generator.seed()
        return cls(config.processors(), True, generator)

    def scores(self, prefix: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """Processed scores ``[V]`` of one logits row given its ``[1, L]`` prefix."""
        row = logits.float()[None]
        if self._chain is not None:
            for processor in self._chain:
                row = processor(prefix, row)
        elif self.processors:
            row = self.processors(prefix, row)
        return row[0]

    def probabilities(self, prefix: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.scores(prefix, logits), dim=-1)

    def choose(self, prefix: torch.Tensor, logits: torch.Tensor) -> int:
        """The next token after ``prefix`` (plain decoding and the prefill)."""
        if self.do_sample:
            return self.sample(self.probabilities(prefix, logits))
        return int(argmax(self.scores(prefix, logits)))

    def known_greedy(self, raw: int, ranking: Callable[[], Ranking], seen: Container[int]) -> int | None:
        """Greedy under a lone repetition penalty (:attr:`keeps_unseen_argmax`): a row's processed choice where it
        is known without processing the row. Its raw argmax ``raw`` where that token is not in the text
        (``seen``); else what its ranking (asked for only then) decides (:meth:`ranked_choice`); else ``None``."""
        return raw if raw not in seen else self.ranked_choice(*ranking(), seen)

    def ranked_choice(self, values: Sequence[float], indices: Sequence[int], seen: Container[int]) -> int | None:
        """Greedy under a lone repetition penalty (:attr:`keeps_unseen_argmax`): a logits row's processed choice
        where its highest raw scores (``values`` at ``indices``, highest first: :meth:`ModelStep.ranking`) decide
        it, without processing the row; ``None`` where they do not. The penalty lowers only the tokens in the
        text (``seen``), each keeping its order among them: so the choice is the first token of the ranking not
        in the text, or the highest one in it above that, whichever scores more once penalised. Anything close
        (within :data:`RANKED_MARGIN` of each other), a tie, a NaN, or a ranking all in the text is left to the
        processing."""
        if any(math.isnan(v) for v in values):
            return None
        first = next((j for j, token in enumerate(indices) if token not in seen), None)
        if first is None or first == len(values) - 1 or values.count(values[first]) > 1:
            return None  # unranked tokens may tie with it, or tied tokens choose by index: processing decides
        if first == 0:
            return indices[0]
        top, runner_up = (self._penalised(v) for v in values[:2])
        free = values[first]
        margin = RANKED_MARGIN * max(abs(top), abs(free))
        if top < free - margin:
            return indices[first]
        if top > free + margin and (first == 1 or runner_up < top - margin):
            return indices[0]
        return None

    def _penalised(self, score: float) -> float:
        return score * self._penalty if score < 0 else score / self._penalty

    def sample(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def uniform(self, device: torch.device) -> float:
        return float(torch.rand(1, generator=self.generator, device=device))


def _plain_processor(processor: Any) -> bool:
    """Whether a logits processor takes just ``(input_ids, scores)`` (no extra keyword arguments)."""
    return callable(processor) and len(inspect.signature(processor.__call__).parameters) <= 2


def accept_draft(p_token: float, u: float) -> bool:
    """Accept a deterministic draft token with probability p(token): ``u`` is uniform in [0, 1)."""
    return u < p_token


Ranking = tuple[Sequence[float], Sequence[int]]
"""A logits row's highest values and their indices, highest first (:meth:`ModelStep.ranking`)."""

RowScores = Callable[[int, int, int], torch.Tensor]
"""``(candidate, depth, tokens)`` -> processed scores of the row after the candidate's first ``tokens`` tokens."""

RowChoice = Callable[[int, int, int], int | None]
"""``(candidate, depth, tokens)`` -> that row's processed greedy choice where known without processing, else None."""


def verify_with_policy(
    candidates: Sequence[Sequence[int]],
    row_scores: RowScores,
    policy: TokenPolicy,
    device: torch.device,
    known_choice: RowChoice | None = None,
) -> tuple[int, int, list[int]]:
    """Verify candidates under a processed (greedy or sampled) target; same result shape as verify_greedy.

    ``row_scores(c, 0, 0)`` gives the row after x; ``row_scores(c, m, m + 1)`` the row after
    candidate c's token m. Rows are requested lazily, so only the rows verification reaches are
    processed; greedy, a row whose ``known_choice`` is not None is not processed at all.
    """
    if not policy.do_sample:
        return _verify_processed_greedy(candidates, row_scores, known_choice)
    probs = torch.softmax(row_scores(-1, 0, 0), dim=-1)
    active = list(range(len(candidates)))
    best, emitted = -1, []
    depth_limit = max((len(c) for c in candidates), default=0)
    for depth in range(depth_limit):
        tried: set[int] = set()
        taken: int | None = None
        active = [c for c in active if len(candidates[c]) > depth]
        for c in active:
            token = candidates[c][depth]
            if token in tried:
                continue
            tried.add(token)
            if accept_draft(float(probs[token]), policy.uniform(device)):
                taken = token
                break
            probs[token] = 0.0
            probs = probs / probs.sum()
        if taken is None:
            break
        emitted.append(taken)
        active = [c for c in active if candidates[c][depth] == taken]
        best = active[0]
        probs = torch.softmax(row_scores(best, depth, depth + 1), dim=-1)
    emitted.append(policy.sample(probs))
    return best, len(emitted) - 1, emitted


def _verify_processed_greedy(
    candidates: Sequence[Sequence[int]], row_scores: RowScores, known_choice: RowChoice | None
) -> tuple[int, int, list[int]]:
    """:func:`verify_greedy` on processed scores; each distinct prefix's row is processed once, if at all."""
    memo: dict[tuple[int, ...], int] = {}

    def target(c: int, depth: int, tokens: int) -> int:
        key = tuple(candidates[c][:tokens]) if c >= 0 else ()
        if key not in memo:
            known = known_choice(c, depth, tokens) if known_choice is not None else None
            memo[key] = known if known is not None else int(argmax(row_scores(c, depth, tokens)))
        return memo[key]

    return verify_greedy(target(-1, 0, 0), candidates, lambda c, m: target(c, m, m + 1))
