"""Out of memory during a decoding step (CUDA): the error type, and that the cache memory comes back.

The GPU is filled with ballast after a few steps, so the next step's allocations fail for real.
The app's worker catches ``torch.OutOfMemoryError`` and shows its advice (core/engine/jobs.py,
OOM_ADVICE); this checks what it relies on: that error type, the decoder dropping its KV cache,
the memory returning once the ballast is gone, and a new decoding running afterwards.
"""

from __future__ import annotations

import gc
from dataclasses import asdict, dataclass
from typing import Any

import torch

from core.lookahead import Decoding, LookaheadConfig

SLACK_BYTES = 16 << 20  # step layouts cached on the device by core.lookahead.step_shape


@dataclass
class OomResult:
    raised: str | None  # the exception's type name, None if no step failed
    caught_by_worker: bool  # an instance of torch.OutOfMemoryError, which core/engine/jobs.py catches
    message: str
    steps_before: int  # decoding steps that ran before the ballast
    tokens_kept: int  # tokens decoded before the failure (the worker keeps their text)
    cache_dropped: bool
    allocated_before: int
    allocated_after: int
    memory_returned: bool
    recovered: bool  # a new decoding ran afterwards

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fill_memory(device: torch.device, floor: int = 1 << 20) -> list[torch.Tensor]:
    """Allocate all free device memory in ever smaller blocks, down to ``floor`` bytes."""
    torch.cuda.empty_cache()
    ballast: list[torch.Tensor] = []
    chunk = torch.cuda.mem_get_info(device)[0]
    while chunk >= floor:
        try:
            ballast.append(torch.empty(chunk, dtype=torch.uint8, device=device))
        except torch.cuda.OutOfMemoryError:
            chunk //= 2
    return ballast


def provoke_oom(model: Any, prompt: list[int], config: LookaheadConfig, steps_before: int = 3) -> OomResult:
    """Decode a few lookahead steps, fill the GPU, take one more step, then measure the aftermath."""
    device = model.device
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=4 * steps_before * config.ngram + 64)
    steps = iter(decoding)
    for _ in range(1 + steps_before):
        next(steps)
    ballast = fill_memory(device)
    raised, caught, message = None, False, "no step failed although the GPU was full"
    try:
        for _ in range(8):
            next(steps)
    except torch.cuda.OutOfMemoryError as err:  # torch.OutOfMemoryError's older name, in every torch 2.x
        raised, message = type(err).__name__, str(err).splitlines()[0]
        caught = isinstance(err, getattr(torch, "OutOfMemoryError", ()))
    finally:
        ballast.clear()
    cache_dropped = decoding._cache is None
    tokens_kept = len(decoding.tokens)
    del steps, decoding
    gc.collect()
    torch.cuda.empty_cache()
    after = torch.cuda.memory_allocated(device)
    again = Decoding(model, prompt, max_new_tokens=4)
    list(again)
    return OomResult(
        raised,
        caught,
        message,
        steps_before,
        tokens_kept,
        cache_dropped,
        before,
        after,
        after <= before + SLACK_BYTES,
        len(again.tokens) == 4,
    )
