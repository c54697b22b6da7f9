"""Sliding-window attention (Mistral, Qwen2 with sliding layers, ...) under lookahead's own mask.

A lookahead step moves and drops cache entries by index, so it keeps a full-attention cache and
applies the window in its mask: a token at position q sees keys at positions above q - window,
as transformers' own sliding-window mask does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SlidingWindow:
    """The window size, and whether only some layers use it (then masks go per layer type)."""

    size: int
    mixed: bool


def sliding_window_of(config: Any) -> SlidingWindow | None:
    """The model's sliding attention window, or ``None`` when every layer attends to all tokens."""
    size = getattr(config, "sliding_window", None)
    if not size:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        if "sliding_attention" not in layer_types:
            return None
        return SlidingWindow(int(size), mixed=any(kind != "sliding_attention" for kind in layer_types))
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return SlidingWindow(int(size), mixed=False)


def step_masks(
    mask: torch.Tensor, positions: torch.Tensor, past: int, window: SlidingWindow | None
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The model's ``attention_mask`` for a step: ``mask`` ``[q, past+q]`` as 4D, banded by ``window``.

    ``positions`` are the step tokens' positions; the cache holds positions ``0 .. past-1``.
    """
    full = mask[None, None]
    if window is None or past + len(positions) <= window.size:  # every key is inside the window (no device sync)
        return full
    keys = torch.cat([torch.arange(past, device=positions.device), positions])
    outside = keys[None, :] <= positions[:, None] - window.size
    banded = mask.masked_fill(outside, torch.finfo(mask.dtype).min)[None, None]
    return {"full_attention": full, "sliding_attention": banded} if window.mixed else banded
