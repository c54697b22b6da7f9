"""The step cost curve: one forward pass feeding n tokens after a cached context, as lookahead feeds them.

Each step gets what a lookahead step gets: an additive float 4D mask in the model's dtype
(``[1, 1, n, past + n]``, zeros over the cache), explicit ``position_ids`` and a ``logits_to_keep``
index tensor (about half the rows, as a lookahead step keeps x, the last level and the candidates).
The cache is cropped back after every step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from core.lookahead.stats import device_sync

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)


def step_inputs(size: int, past: int, dtype: torch.dtype, device: torch.device, vocab: int, generator: torch.Generator) -> dict[str, Any]:
    """Model keyword arguments for one ``size``-token step after ``past`` cached tokens."""
    block = torch.full((size, size), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    mask = torch.cat([block.new_zeros(size, past), block], dim=1)[None, None]
    return {
        "input_ids": torch.randint(10, vocab, (1, size), generator=generator).to(device),
        "position_ids": torch.arange(past, past + size, device=device)[None],
        "attention_mask": mask,
        "logits_to_keep": torch.arange(min(size, 1 + size // 2), device=device),
    }


def measure_curve(model: Any, sizes: Sequence[int] = DEFAULT_SIZES, context: int = 512, repeats: int = 5) -> list[float]:
    """Median seconds of one step per size; sizes interleave within each repeat, the first round is dropped."""
    from transformers import DynamicCache

    device = model.device
    dtype = model.get_input_embeddings().weight.dtype
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    cache = DynamicCache(config=model.config)
    times: dict[int, list[float]] = {s: [] for s in sizes}
    with torch.inference_mode():
        prefix = torch.randint(10, vocab, (1, context), generator=generator).to(device)
        model(input_ids=prefix, cache=cache, use_cache=True, logits_to_keep=1)
        inputs = {s: step_inputs(s, context, dtype, device, vocab, generator) for s in sizes}
        for _ in range(repeats + 1):
            for size in sizes:
                device_sync(device)
                start = time.perf_counter()
                model(**inputs[size], cache=cache, use_cache=True)
                device_sync(device)
                times[size].append(time.perf_counter() - start)
                cache.crop(-size)
    return [statistics.median(times[s][1:]) for s in sizes]
