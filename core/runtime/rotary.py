"""The rotary embedding's cos and sin of every position, made once, for the int8 decoder.

transformers' rotary module is some ten tensor operations a step, and between steps every operation
runs on caches the step's weights have just flushed: a tenth of a millisecond or more each. Where the
embedding's frequencies do not depend on the positions seen (every rope type but the dynamic ones),
its tables for positions 0..P are made by the model's own module in one call, each value computed by
the same operations as for that position alone, and the decoder picks each token's row.
"""

from __future__ import annotations

from typing import Any

import torch

STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})
"""Rope types whose frequencies are fixed at load (``dynamic`` and ``longrope`` change them with the length)."""


class RotaryTable:
    """cos and sin ``[P, head_dim]`` in fp32 (the module's values in the model's dtype, widened) for positions
    ``0..P``, grown (doubled) as steps reach further; for a dynamic rope type, each step's own rows."""

    def __init__(self, rotary: Any, dtype: torch.dtype, device: torch.device) -> None:
        self.rotary = rotary
        self.like = torch.empty(0, dtype=dtype, device=device)  # the module reads only its dtype and device
        self.static = getattr(rotary, "rope_type", None) in STATIC_ROPE_TYPES
        self.cos = self.sin = torch.empty(0, 0)

    def lookup(self, positions: torch.Tensor, end: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For a step at ``positions`` (all below ``end``): the rows to read, and the cos and sin tables."""
        if not self.static:
            cos, sin = self._rows(positions)
            return torch.arange(len(positions), device=positions.device), cos, sin
        if end > len(self.cos):
            self.cos, self.sin = self._rows(torch.arange(max(end, 2 * len(self.cos)), device=positions.device))
        return positions, self.cos, self.sin

    def _rows(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.rotary(self.like, position_ids=positions[None])
        return cos[0].float().contiguous(), sin[0].float().contiguous()
