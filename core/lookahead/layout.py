"""The token layout of one lookahead step: position offsets, attention mask block, kept logit rows.

One step feeds ``[x, level 0] [level 1] ... [level L-1] [cand 1] ... [cand g]`` where each level row
has W tokens (row 0 starts with x, the last accepted token) and each candidate has N-1 tokens.
Layouts depend only on (W, N-1, L, g), so they are built once and reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class StepLayout:
    """Index tensors and the mask block for one step shape.

    Attributes:
        size: number of new tokens in the step.
        position_offsets: ``[size]`` offsets from x's position.
        mask_block: ``[size, size]`` additive mask among the new tokens (0 attend, min blocked).
        keep_rows: ``[1 + W + g*(N-1)]`` rows whose logits are needed: x, the last level, candidates.
        candidate_start: index of the first candidate token in the step.
    """

    size: int
    position_offsets: torch.Tensor
    mask_block: torch.Tensor
    keep_rows: torch.Tensor
    candidate_start: int


@lru_cache(maxsize=256)
def step_layout(window: int, cand_len: int, levels: int, guesses: int, dtype: torch.dtype, device: torch.device) -> StepLayout:
    """Build (once) the layout for ``levels`` level rows of ``window`` tokens and ``guesses`` candidates."""
    lookahead = levels * window
    size = lookahead + guesses * cand_len
    offsets = torch.empty(size, dtype=torch.long)
    allowed = torch.zeros(size, size, dtype=torch.bool)
    for row in range(levels):
        for col in range(window):
            i = row * window + col
            offsets[i] = row + col
            allowed[i, : col + 1] = True  # x and level-0 tokens up to this column
            for upper in range(1, row + 1):  # this column on levels 1..row (itself included)
                allowed[i, upper * window + col] = True
    for cand in range(guesses):
        start = lookahead + cand * cand_len
        for m in range(cand_len):
            i = start + m
            offsets[i] = 1 + m
            allowed[i, 0] = True  # x
            allowed[i, start : i + 1] = True
    mask = torch.zeros(size, size, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    last_level = (levels - 1) * window + torch.arange(window)
    keep = torch.cat([torch.tensor([0]), last_level, torch.arange(lookahead, size)])
    return StepLayout(
        size=size,
        position_offsets=offsets.to(device),
        mask_block=mask.to(device),
        keep_rows=keep.to(device),
        candidate_start=lookahead,
    )
