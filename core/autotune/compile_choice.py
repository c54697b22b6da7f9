"""Whether the compiled 1-token step pays here: it needs a C++ compiler, and inductor's code is not
faster everywhere, so it is kept only where it measures faster than the eager step."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from core.progress import Cancelled
from core.runtime.compiled.step import CompiledStep, compile_step, why_not_compilable
from core.runtime.lean_step import LlamaStep

log = logging.getLogger(__name__)

COMPILED_MARGIN = 1.03  # the compiled 1-token step must be this much cheaper than the eager one to be kept


@dataclass(frozen=True)
class KeptCompiledStep:
    """A compiled step that measured faster, and the median seconds of its 1-token step in those rounds."""

    step: CompiledStep
    seconds: float


def choose_compiled_step(
    model: Any, cancelled: Callable[[], bool] | None = None, rounds: int = 12
) -> KeptCompiledStep | None:
    """Compile the 1-token step of ``model`` and keep it only if it measures faster than the eager one here.

    The two steps alternate over the same cached context, so that machine noise hits both alike.
    Raises :class:`~core.progress.Cancelled` when ``cancelled`` says so.
    """
    if why_not_compilable(model) is not None:
        return None
    compiled = compile_step(model)
    if isinstance(compiled, str):
        log.info("the 1-token step stays eager: %s", compiled)
        return None
    context = 128
    inputs = compiled.inputs(model)
    steps = (LlamaStep(model, context + 2), LlamaStep(model, context + 2, inputs))
    ids = torch.randint(0, model.config.vocab_size, (context + 1,), generator=torch.Generator().manual_seed(0))
    times: dict[int, list[float]] = {0: [], 1: []}
    with torch.inference_mode():
        for step in steps:
            step.forward(ids[:context], torch.arange(context), 1)
        for r in range(rounds + 1):
            for which, step in enumerate(steps):
                if cancelled is not None and cancelled():
                    raise Cancelled
                start = time.perf_counter()
                step.forward(ids[context:], torch.tensor([context]), 1)
                if r:  # the first round warms up
                    times[which].append(time.perf_counter() - start)
                step.keep(context - 1, 2, [])
    eager_s, compiled_s = (statistics.median(times[w]) for w in (0, 1))
    log.info("1-token step: eager %.1f ms, compiled %.1f ms", 1000 * eager_s, 1000 * compiled_s)
    if compiled_s * COMPILED_MARGIN > eager_s:
        return None
    return KeptCompiledStep(compiled, compiled_s)
