"""One forward pass over a step's new tokens, with the KV cache of everything accepted before them.

The decoder and the step cost measurement talk to a :class:`ModelStep` only. Two implementations:
:class:`~core.runtime.lean_step.LlamaStep`, our own lean forward for LLaMA-family models over a
preallocated cache, and :class:`TransformersStep`, the model's own forward with transformers'
``DynamicCache``, for every other architecture. :meth:`core.runtime.prepared.PreparedModel.step` picks.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from transformers import DynamicCache

from core.runtime.sliding import SlidingWindow, sliding_window_of, step_masks


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """The index of each row's first maximum, as ``logits.argmax(-1)`` gives it: ``torch.max`` finds the
    same index 4-5x faster on bf16 rows on the CPU."""
    return logits.max(-1).indices


RANKED = 16
"""The highest logits of a row :meth:`ModelStep.ranking` gives (the int8 decoder's ``kRanked``)."""


def ranked(row: torch.Tensor) -> tuple[list[float], list[int]]:
    """The :data:`RANKED` highest values of a logits row and their indices, highest first (``torch.topk``)."""
    values, indices = torch.topk(row.float(), min(RANKED, row.shape[-1]))
    return values.tolist(), indices.tolist()


class ModelStep(Protocol):
    """A model with its KV cache, fed one step at a time (batch size 1)."""

    @property
    def length(self) -> int:
        """Tokens in the cache."""
        ...

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, keep: int | torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits ``[rows, vocab]`` of the kept rows (the last ``keep``, or those indexed) of a step.

        ``ids`` and ``positions`` are ``[q]``; ``mask`` is an additive ``[q, q]`` mask among the new tokens
        in the model's dtype (each sees every cached entry), or ``None`` for causal attention among them.
        The step's entries join the cache.
        """
        ...

    def greedy(self, logits: torch.Tensor) -> list[int]:
        """Each row's first maximum of ``logits``, the last :meth:`forward`'s (where the step found them as it
        computed the logits, without another tensor operation)."""
        ...

    def ranking(self, logits: torch.Tensor, row: int) -> tuple[list[float], list[int]]:
        """A row's :data:`RANKED` highest logits and their indices, highest first (NaN first, equal values by
        index where the step found them as it computed the logits; else ``torch.topk``'s order)."""
        ...

    def pass_over(self, tokens: int) -> None:
        """Take ``tokens`` more cache entries as if they had been fed, computing as little as the implementation
        allows (their content is unspecified): a step's cost measured after a context, without its prefill."""
        ...

    def keep(self, past: int, step_size: int, sources: list[int]) -> None:
        """Keep entry ``past`` and the step entries at offsets ``sources`` (moved right after it); drop the rest."""
        ...


class TransformersStep:
    """The model's own forward with a ``DynamicCache``: any causal LM transformers can run."""

    def __init__(self, model: Any, *, lookahead: bool) -> None:
        self.model = model
        # Lookahead moves cache entries by index, so it needs full-attention layers; its mask applies any sliding window.
        self.cache = DynamicCache() if lookahead else DynamicCache(config=model.config)
        self.sliding: SlidingWindow | None = sliding_window_of(model.config)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, keep: int | torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        attention = (
            None if mask is None else step_masks(over_cache(mask, self.length), positions, self.length, self.sliding)
        )
        out = self.model(
            input_ids=ids[None],
            position_ids=positions[None],
            attention_mask=attention,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits[0]

    def greedy(self, logits: torch.Tensor) -> list[int]:
        return argmax(logits).tolist()

    def ranking(self, logits: torch.Tensor, row: int) -> tuple[list[float], list[int]]:
        return ranked(logits[row])

    def pass_over(self, tokens: int) -> None:
        """A prefill of ``tokens`` zero ids: transformers' caches fill only through the model."""
        past = self.length
        ids = torch.zeros(tokens, dtype=torch.long, device=self.model.device)
        self.forward(ids, torch.arange(past, past + tokens, device=self.model.device), 1)

    def keep(self, past: int, step_size: int, sources: list[int]) -> None:
        accepted = len(sources)
        if sources and sources != list(range(1, 1 + accepted)):  # not already in place
            src = torch.tensor([past + s for s in sources], device=self.model.device)
            for layer in self.cache.layers:
                layer.keys[:, :, past + 1 : past + 1 + accepted] = layer.keys[:, :, src]
                layer.values[:, :, past + 1 : past + 1 + accepted] = layer.values[:, :, src]
        self.cache.crop(-(step_size - 1 - accepted))


def causal_mask(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[size, size]`` additive mask: causal among ``size`` new tokens."""
    return torch.full((size, size), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)


def over_cache(mask: torch.Tensor, past: int) -> torch.Tensor:
    """A step's ``[q, q]`` mask among its tokens widened to ``[q, past + q]``: every cached entry seen."""
    return torch.cat([mask.new_zeros(mask.shape[0], past), mask], dim=1)
