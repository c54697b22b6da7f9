"""Which compiled layers pay here: compiling needs a C++ compiler, and inductor's code is not faster
everywhere, so each compiled layer is kept only for the steps where it measures faster than eager.

Two steps are measured, alternating over the same cached context so that machine noise hits all
alike: a 1-token step (eager, the 1-token layer, the rows layer) and a wider one, lookahead's
(eager, the rows layer). The rows layer may also win the 1-token step (where both layers' products
go through the same kernel, say); then it runs every step and the 1-token layer is dropped. The int8
decoder (int8 weights through our kernels) runs every step or none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from core.progress import Cancelled
from core.runtime.compiled.parallel import compile_in_parallel
from core.runtime.compiled.step import CompiledStep, compile_step, why_not_compilable
from core.runtime.lean_step import LlamaStep
from core.runtime.step import causal_mask

log = logging.getLogger(__name__)

COMPILED_MARGIN = 1.03  # a compiled layer must make its step this much cheaper than the eager one to be kept
WIDE_STEP = 8  # the wider step measured: about what lookahead's settings feed on a CPU


@dataclass(frozen=True)
class KeptCompiledStep:
    """The compiled layers that measured faster, and the seconds of the 1-token step as it now runs (fastest round)."""

    step: CompiledStep
    seconds: float


def choose_compiled_step(
    model: Any, cancelled: Callable[[], bool] | None = None, rounds: int = 12
) -> KeptCompiledStep | None:
    """Compile the layers of ``model`` and keep each where it measures faster than the eager step here
    (``None``: every step stays eager). Raises :class:`~core.progress.Cancelled` when ``cancelled`` says so."""
    if why_not_compilable(model) is not None:
        return None
    compile_in_parallel([model], cancelled)  # its two layers side by side, where neither is stored yet
    compiled = compile_step(model)
    if isinstance(compiled, str):
        log.info("the decoding steps stay eager: %s", compiled)
        return None
    one_token, rows = compiled.only(one_token=True, rows=False), compiled.only(one_token=False, rows=True)
    candidates = {"eager": None, "1-token layer": one_token, "rows layer": rows}
    if one_token is None:  # the int8 decoder, for every step
        del candidates["1-token layer"]
    one = _fastest_seconds(model, candidates, 1, cancelled, rounds)
    wide = _fastest_seconds(model, {"eager": None, "rows layer": rows}, WIDE_STEP, cancelled, rounds)
    log.info(
        "1-token step: %s; %d-token step: %s",
        ", ".join(f"{name} {1000 * s:.1f} ms" for name, s in one.items()),
        WIDE_STEP,
        ", ".join(f"{name} {1000 * s:.1f} ms" for name, s in wide.items()),
    )
    keep_rows = wide["rows layer"] * COMPILED_MARGIN <= wide["eager"]
    if one_token is None:  # the int8 decoder: all steps or none (its tokens are exact only where it runs them all)
        keep_rows = keep_rows or one["rows layer"] * COMPILED_MARGIN <= one["eager"]
        keep_one = False
    elif keep_rows:  # 1-token steps run the faster compiled layer (where the 1-token one is dropped, the rows one)
        keep_one = one["1-token layer"] < one["rows layer"]
    else:
        keep_one = one["1-token layer"] * COMPILED_MARGIN <= one["eager"]
    kept = compiled.only(one_token=keep_one, rows=keep_rows)
    if kept is None:
        return None
    return KeptCompiledStep(kept, one["1-token layer"] if keep_one else one["rows layer"])


def _fastest_seconds(
    model: Any,
    candidates: dict[str, CompiledStep | None],
    size: int,
    cancelled: Callable[[], bool] | None,
    rounds: int,
) -> dict[str, float]:
    """Seconds of a ``size``-token step (a lookahead-like one: masked, half its rows kept) after 128 cached
    tokens, per candidate (``None``: eager): the fastest round, as the step cost curve takes it
    (:func:`~core.autotune.measure.measure_step_seconds`); the first round warms up."""
    context = 128
    steps = {
        name: LlamaStep(model, context + size + 1, None if c is None else c.inputs(model))
        for name, c in candidates.items()
    }
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (size,), generator=generator)
    positions = torch.arange(context, context + size)
    dtype = model.get_input_embeddings().weight.dtype
    mask = causal_mask(size, dtype, torch.device("cpu")) if size > 1 else None
    keep = torch.arange(1 + size // 2) if size > 1 else 1
    times: dict[str, list[float]] = {name: [] for name in steps}
    with torch.inference_mode():
        for step in steps.values():
            step.pass_over(context)
        for r in range(rounds + 1):
            for name, step in steps.items():
                if cancelled is not None and cancelled():
                    raise Cancelled
                start = time.perf_counter()
                step.forward(ids, positions, keep, mask)
                if r:
                    times[name].append(time.perf_counter() - start)
                step.keep(context - 1, size + 1, [])
    return {name: min(t) for name, t in times.items()}
