"""The check's sections. Each takes the run's context and its deadline and returns a JSON-ready dict
with ``status`` ("ok", "partial", "skipped") and ``notes`` saying what was left out and why."""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.bench.gpu.auto_choice import calibrate_auto
from core.bench.gpu.budget import Deadline
from core.bench.gpu.exactness import compare, random_prompts
from core.bench.gpu.oom import provoke_oom
from core.bench.gpu.quantize import bitsandbytes_status
from core.bench.gpu.real_model import bench_prompts, eos_ids, load_folder, run_methods, standard_methods, summarize
from core.bench.gpu.shapes import MODES, QUANT_MODES, SHAPES, random_model, weight_bytes
from core.bench.gpu.step_cost import measure_curve
from core.bench.gpu.syncs import probe_syncs
from core.lookahead import LookaheadConfig

BYTES_PER_PARAMETER = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0}
BUILD_AND_MEASURE_GUESS_S = {"tiny": 1.0, "1b": 8.0, "8b": 25.0, "13b": 45.0}  # before any item has run


@dataclass
class Context:
    """What the command line asked for."""

    device: torch.device
    tiny: bool
    shapes: Sequence[str]
    sizes: Sequence[int]
    context_tokens: int
    repeats: int
    model_dir: Path | None
    prompts_per_suite: int
    max_new_tokens: int
    _model: tuple[tuple[str, str], Any] | None = field(default=None, repr=False)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def check_shape(self) -> str:
        """The shape of the random model behind exactness, syncs and the out-of-memory check."""
        return "tiny" if self.tiny else "1b"

    def model(self, shape: str, mode: str) -> Any:
        """A random model, kept until another one is asked for (only one lives at a time)."""
        key = (shape, mode)
        if self._model is None or self._model[0] != key:
            self.release()
            self._model = (key, random_model(SHAPES[shape], mode, self.device))
        return self._model[1]

    def release(self) -> None:
        self._model = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def _result(status: str = "ok", **data: Any) -> dict[str, Any]:
    return {"status": status, "notes": [], **data}


def step_cost(ctx: Context, deadline: Deadline) -> dict[str, Any]:
    """Step cost curves per shape and dtype/quantization."""

    out = _result(context=ctx.context_tokens, sizes=list(ctx.sizes), rows=[])
    usable, bnb_note = bitsandbytes_status()
    out["notes"].append(bnb_note + ("; nf4 and int8 layers compute in fp16, the LM head stays fp16" if usable else ""))
    modes = ["fp16", "bf16", *(QUANT_MODES if usable else ())]
    if ctx.cuda and not torch.cuda.is_bf16_supported():
        modes.remove("bf16")
        out["notes"].append("bf16: not supported by this GPU, skipped")
    seconds_per_item: dict[str, float] = {}
    for shape in ctx.shapes:
        for mode in modes:
            estimate = seconds_per_item.get(shape, BUILD_AND_MEASURE_GUESS_S.get(shape, 30.0))
            if not deadline.allows(estimate):
                out["status"] = "partial"
                out["notes"].append(f"{shape} {mode}: skipped, time budget spent (needs about {estimate:.0f} s)")
                continue
            if ctx.cuda and not _fits(shape, mode, ctx):
                out["status"] = "partial"
                out["notes"].append(f"{shape} {mode}: skipped, not enough free GPU memory")
                continue
            start = time.perf_counter()
            try:
                out["rows"].append(_curve_row(ctx, shape, mode))
            except Exception as err:  # e.g. a bitsandbytes kernel missing for this GPU: the other rows still count
                out["status"] = "partial"
                out["notes"].append(f"{shape} {mode}: failed ({type(err).__name__}: {err})")
            seconds_per_item[shape] = time.perf_counter() - start
            ctx.release()  # before the next build: two 13B models need not fit at once
    return out


def _curve_row(ctx: Context, shape: str, mode: str) -> dict[str, Any]:
    start = time.perf_counter()
    model = ctx.model(shape, mode)
    built = time.perf_counter() - start
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    seconds = measure_curve(model, ctx.sizes, ctx.context_tokens, ctx.repeats)
    return {
        "shape": shape,
        "like": SHAPES[shape].like,
        "mode": mode,
        "seconds": seconds,
        "ratio": [s / seconds[0] for s in seconds],
        "weight_bytes": weight_bytes(model),
        "peak_bytes": torch.cuda.max_memory_allocated(ctx.device) if ctx.cuda else None,
        "build_seconds": built,
    }


def _fits(shape: str, mode: str, ctx: Context) -> bool:
    free, _ = torch.cuda.mem_get_info(ctx.device)
    built_as = "fp16" if mode in QUANT_MODES else mode  # quantized models are built in fp16, then quantized
    return free >= SHAPES[shape].parameters() * BYTES_PER_PARAMETER[built_as] * 1.25 + (2 << 30)


def exactness(ctx: Context, deadline: Deadline) -> dict[str, Any]:
    """Lookahead vs plain greedy on a random model, fp32 (must be identical) and fp16 (share reported)."""

    shape = SHAPES[ctx.check_shape]
    configs = (
        [LookaheadConfig(4, 4, 4), LookaheadConfig(7, 5, 7)]
        if ctx.tiny
        else [LookaheadConfig(7, 5, 7), LookaheadConfig(15, 5, 15)]
    )
    count, length, new = (4, 32, 32) if ctx.tiny else (6, 64, 64)
    prompts = random_prompts(count, length, shape.vocab)
    out = _result(shape=shape.name, prompts=count, prompt_tokens=length, max_new_tokens=new, rows=[])
    for mode in ("fp32", "fp16"):
        if not deadline.allows(0.0):
            out["status"] = "partial"
            out["notes"].append(f"{mode}: skipped, time budget spent")
            continue
        out["rows"] += [r.as_dict() for r in compare(ctx.model(shape.name, mode), mode, prompts, configs, new)]
    if ctx.cuda:
        out["notes"].append(f"TF32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}")
    return out


def syncs(ctx: Context, deadline: Deadline) -> dict[str, Any]:
    """Host synchronisations per steady-state step, plain and lookahead."""

    out = _result(rows=[])
    if not ctx.cuda:
        out["notes"].append(
            "CPU: the sync debug mode needs CUDA; the probe only ran the loop and counted explicit synchronize calls"
        )
    model = ctx.model(ctx.check_shape, "fp16")
    prompt = random_prompts(1, 64, SHAPES[ctx.check_shape].vocab, seed=1)[0]
    for config in (None, LookaheadConfig(4, 4, 4) if ctx.tiny else LookaheadConfig(15, 5, 15)):
        out["rows"].append(probe_syncs(model, prompt, config).as_dict())
    return out


def out_of_memory(ctx: Context, deadline: Deadline) -> dict[str, Any]:
    """A real out-of-memory during a lookahead step on CUDA; skipped on the CPU."""

    if not ctx.cuda:
        return _result("skipped", notes=["CPU: no device memory to fill; this section runs on CUDA only"])
    model = ctx.model(ctx.check_shape, "fp16")
    prompt = random_prompts(1, 512, SHAPES[ctx.check_shape].vocab, seed=2)[0]
    return _result(**provoke_oom(model, prompt, LookaheadConfig(15, 5, 15)).as_dict())


def real_model(ctx: Context, deadline: Deadline) -> dict[str, Any]:
    """The model folder given with --model: every grid setting and Auto against generate and plain."""

    if ctx.model_dir is None:
        return _result(
            "skipped", notes=["no --model DIR given (export one with `python -m app export-model`, see README)"]
        )
    ctx.release()
    dtype = MODES["fp16"] if ctx.cuda else MODES["fp32"]
    start = time.perf_counter()
    model, tokenizer, notes = load_folder(ctx.model_dir, ctx.device, dtype)
    out = _result(
        model=str(ctx.model_dir),
        dtype=str(dtype).removeprefix("torch."),
        load_seconds=time.perf_counter() - start,
        max_new_tokens=ctx.max_new_tokens,
        rows=[],
    )
    out["notes"] += notes
    auto = calibrate_auto(model, ctx.device)
    out["auto"] = auto.as_dict()
    out["notes"].append(auto.note)
    prompts = bench_prompts(tokenizer, ctx.prompts_per_suite)
    results, done = run_methods(
        model, prompts, standard_methods(auto.chooser), eos_ids(model, tokenizer), ctx.max_new_tokens, deadline
    )
    out["prompts_done"], out["prompts_planned"] = done, len(prompts)
    if done < len(prompts):
        out["status"] = "partial"
        out["notes"].append(f"time budget spent after {done} of {len(prompts)} prompts")
    out["rows"] = summarize(results, done)
    del model
    ctx.release()
    return out
