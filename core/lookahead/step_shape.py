"""The shape of one step: position offsets, attention mask block, kept logit rows.

A step feeds ``[x, level 0] [level 1] ... [level L-1] [tree nodes]``: each level row has W tokens
(row 0 starts with x, the last accepted token) and the verification branch is a token tree of the
candidate n-grams (:mod:`core.lookahead.tree`). With W = 0 there is no lookahead branch: the step
is ``[x] [tree nodes]`` (verification only). A shape depends only on (W, L, tree shape), so it is
built once per shape and reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class StepShape:
    """Index tensors and the mask block for one step shape.

    Attributes:
        size: number of new tokens in the step.
        position_offsets: ``[size]`` offsets from x's position.
        mask_block: ``[size, size]`` additive mask among the new tokens (0 attend, min blocked).
        keep_rows: rows whose logits are needed: x, the last level's W tokens, every tree node.
        tree_start: index of the first tree node in the step.
        tree_row: index of the first tree node among the kept rows.
    """

    size: int
    position_offsets: torch.Tensor
    mask_block: torch.Tensor
    keep_rows: torch.Tensor
    tree_start: int
    tree_row: int


@lru_cache(maxsize=512)
def step_shape(
    window: int, levels: int, parents: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> StepShape:
    """The shape for ``levels`` level rows of ``window`` tokens (none when ``window == 0``) and a tree.

    ``parents[i]`` is tree node i's parent node (-1: a child of x), as in :class:`~core.lookahead.tree.CandidateTree`.
    """
    lookahead = levels * window if window else 1
    size = lookahead + len(parents)
    offsets = torch.zeros(size, dtype=torch.long)
    allowed = torch.zeros(size, size, dtype=torch.bool)
    allowed[0, 0] = True
    for row in range(levels if window else 0):
        for col in range(window):
            i = row * window + col
            offsets[i] = row + col
            allowed[i, : col + 1] = True  # x and level-0 tokens up to this column
            for upper in range(1, row + 1):  # this column on levels 1..row (itself included)
                allowed[i, upper * window + col] = True
    depth = [0] * len(parents)
    for node, parent in enumerate(parents):
        i = lookahead + node
        depth[node] = 1 if parent < 0 else depth[parent] + 1
        offsets[i] = depth[node]
        allowed[i] = allowed[lookahead + parent] if parent >= 0 else allowed[0]
        allowed[i, i] = True
    mask = torch.zeros(size, size, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    last_level = (levels - 1) * window + torch.arange(window) if window else torch.empty(0, dtype=torch.long)
    keep = torch.cat([torch.tensor([0]), last_level, torch.arange(lookahead, size)])
    return StepShape(
        size=size,
        position_offsets=offsets.to(device),
        mask_block=mask.to(device),
        keep_rows=keep.to(device),
        tree_start=lookahead,
        tree_row=1 + (window if window else 0),
    )
