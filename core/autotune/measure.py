"""Measuring what a step costs here: the forward passes the decoder runs, timed as it times them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from core.progress import Cancelled
from core.runtime.prepared import PreparedModel, prepared
from core.runtime.step import causal_mask
from core.runtime.timing import device_sync

CPU_CURVE_SIZES = (1, 2, 4, 8, 16, 32)
CUDA_CURVE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def measure_step_seconds(
    model: PreparedModel | Any,
    sizes: Sequence[int] = CPU_CURVE_SIZES,
    context: int = 256,
    repeats: int = 5,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list[float]:
    """Seconds of one step feeding each size after ``context`` cached tokens: the fastest of the rounds.

    Steps run through the step implementation the decoder uses and are built as it builds them
    (a 1-token step without a mask, wider ones with a 4D additive mask, only the rows they keep),
    and the time includes reading each kept row's argmax, as the decoder does. Sizes are interleaved
    within each round and a first round warms up and is dropped. The fastest round, not the median:
    a processor whose speed swings (memory bandwidth shared with other machines) slows the
    bandwidth-bound 1-token step more than the wide ones, so a median taken at a slow moment makes
    wide steps look cheap and Auto run lookahead where it loses. ``model``: a transformers causal
    LM, or a :class:`~core.runtime.prepared.PreparedModel` (its compiled layers then run the steps
    they were kept for).
    """
    model = prepared(model)
    device, dtype = model.device, model.dtype
    vocab = model.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    step = model.step(context + max(sizes) + 1, lookahead=True)
    times: dict[int, list[float]] = {s: [] for s in sizes}
    rounds = repeats + 1
    with torch.inference_mode():
        step.pass_over(context)
        for r in range(rounds):
            for size in sizes:
                if cancelled is not None and cancelled():
                    raise Cancelled
                ids = torch.randint(0, vocab, (size,), generator=generator).to(device)
                mask = causal_mask(size, dtype, device) if size > 1 else None
                positions = torch.arange(context, context + size, device=device)
                keep = torch.arange(min(size, 1 + size // 2), device=device) if size > 1 else 1
                device_sync(device)
                start = time.perf_counter()
                step.greedy(step.forward(ids, positions, keep, mask))
                times[size].append(time.perf_counter() - start)
                step.keep(context - 1, size + 1, [])  # back to ``context`` entries
            if progress is not None:
                progress((r + 1) / rounds)
    return [min(times[s][1:]) for s in sizes]
