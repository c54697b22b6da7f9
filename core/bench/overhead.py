"""Where the milliseconds of one decoding step go, per step implementation, from torch's profiler.

Each operator's own time is put in a category: the weight matrix products, attention, cache
copies, other tensor operators, the compiled layers (one opaque call each); what the operators do
not account for is Python and dispatch.
Steps are fed as the decoder feeds them (a 1-token plain step, a lookahead-sized step with its
mask) after ``context`` cached tokens, alternating between implementations.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from core.autotune.measure import CPU_CURVE_SIZES, CUDA_CURVE_SIZES, measure_step_seconds
from core.runtime.architecture import supports_llama_step
from core.runtime.compiled.step import compile_step, why_not_compilable
from core.runtime.lean_step import COMPILED_LAYERS, LlamaStep
from core.runtime.prepared import PreparedModel
from core.runtime.step import ModelStep, TransformersStep, causal_mask
from core.runtime.timing import device_sync
from core.runtime.weights.packed import (
    PACKED,
    PACKED_ROWS,
    PLAIN,
    apply_layout,
    layout_of,
    packing_available,
    rows_copy_allowed,
)

CATEGORIES = ("weights", "attention", "cache", "other ops", COMPILED_LAYERS, "python and dispatch")
_WEIGHT_OPS = (
    "aten::mm",
    "mkldnn::_linear_pointwise",
    "aten::addmm",
    "aten::bmm",
    "aten::_weight_int8pack_mm",
    "aten::_weight_int4pack_mm_for_cpu",
    "aten::linear",
)
_CACHE_OPS = (
    "aten::cat",
    "aten::copy_",
    "aten::index",
    "aten::index_put_",
    "aten::slice_scatter",
    "aten::zeros",
    "aten::fill_",
)


@dataclass
class StepProfile:
    """Milliseconds per step of one implementation at one step size, by category."""

    implementation: str
    size: int
    total_ms: float
    parts_ms: dict[str, float] = field(default_factory=dict)


def category(op: str) -> str:
    """The category an operator's own time counts in; the compiled layers' code (weights, attention,
    the LM head and all) is one call the profiler does not see into."""
    if op == COMPILED_LAYERS:
        return COMPILED_LAYERS
    if op in _WEIGHT_OPS:
        return "weights"
    if "scaled_dot_product" in op or "attention" in op:
        return "attention"
    if op in _CACHE_OPS:
        return "cache"
    return "other ops"


def implementations(model: Any, capacity: int) -> dict[str, ModelStep]:
    """Every step implementation that runs ``model``, by name; on the CPU also the lean step over
    copies in the other weight layouts, and with the compiled layers (1-token and rows) where they compile."""
    steps: dict[str, ModelStep] = {"transformers": TransformersStep(model, lookahead=True)}
    if supports_llama_step(model):
        steps["lean"] = LlamaStep(model, capacity)
        if model.device.type == "cpu" and packing_available() and layout_of(model) == PLAIN:
            for layout in [PACKED] + ([PACKED_ROWS] if rows_copy_allowed(model) else []):
                copied = copy.deepcopy(model)
                apply_layout(copied, layout)
                steps[f"lean, {layout} weights"] = LlamaStep(copied, capacity)
        for name, step in list(steps.items()):
            if name.startswith("lean") and model.device.type == "cpu" and why_not_compilable(step.model) is None:
                copied = copy.deepcopy(step.model)
                compiled = compile_step(copied)
                if not isinstance(compiled, str):
                    steps[f"{name}, compiled"] = LlamaStep(copied, capacity, compiled.inputs(copied))
    return steps


def profile_steps(
    model: Any, sizes: Sequence[int] = (1, 12), context: int = 256, repeats: int = 20
) -> list[StepProfile]:
    """Profile each implementation at each step size; the first round is a warm-up."""
    device = model.device
    dtype = model.get_input_embeddings().weight.dtype
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    steps = implementations(model, context + max(sizes) + 1)
    results: list[StepProfile] = []
    with torch.inference_mode():
        prefix = torch.randint(0, vocab, (context,), generator=generator).to(device)
        for step in steps.values():
            step.forward(prefix, torch.arange(context, device=device), 1)
        for size in sizes:
            ids = torch.randint(0, vocab, (size,), generator=generator).to(device)
            positions = torch.arange(context, context + size, device=device)
            mask = None if size == 1 else causal_mask(size, dtype, device)
            for name, step in steps.items():
                _run(step, ids, positions, mask, context)  # warm-up
                device_sync(device)
                start = time.perf_counter()
                for _ in range(repeats):
                    _run(step, ids, positions, mask, context)
                device_sync(device)
                wall = (time.perf_counter() - start) * 1000 / repeats  # timed apart: profiling slows the Python side
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(repeats):
                        _run(step, ids, positions, mask, context)
                parts = dict.fromkeys(CATEGORIES, 0.0)
                for event in prof.key_averages():
                    parts[category(event.key)] += event.self_cpu_time_total / 1000 / repeats
                parts["python and dispatch"] = max(0.0, wall - sum(parts.values()))
                results.append(StepProfile(name, size, wall, parts))
    return results


def _run(step: ModelStep, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, context: int) -> None:
    keep = torch.arange(min(len(ids), 1 + len(ids) // 2), device=ids.device) if len(ids) > 1 else 1
    step.forward(ids, positions, keep, mask)
    step.keep(context - 1, len(ids) + 1, [])  # back to the context: every round measures the same step


def profile_table(profiles: Sequence[StepProfile]) -> str:
    """A markdown table: one row per (implementation, size), ms per category and in all."""
    lines = [
        "| step | tokens | " + " | ".join(CATEGORIES) + " | total ms |",
        "|---|---:|" + "---:|" * (len(CATEGORIES) + 1),
    ]
    for p in profiles:
        cells = " | ".join(f"{p.parts_ms[c]:.1f}" for c in CATEGORIES)
        lines.append(f"| {p.implementation} | {p.size} | {cells} | {p.total_ms:.1f} |")
    return "\n".join(lines)


def curve_table(models: Mapping[str, PreparedModel], sizes: Sequence[int] | None = None) -> str:
    """A markdown table: each model's step cost curve as Auto's calibration measures it (its fastest step, 256
    cached tokens, the sizes it measures on the models' device), in ms and in 1-token steps: what decides
    whether lookahead pays here."""
    if sizes is None:
        on_gpu = any(model.device.type == "cuda" for model in models.values())
        sizes = CUDA_CURVE_SIZES if on_gpu else CPU_CURVE_SIZES
    header = " | ".join(str(size) for size in sizes)
    lines = [f"| step cost curve | {header} |", "|---|" + "---:|" * len(sizes)]
    for name, model in models.items():
        seconds = measure_step_seconds(model, sizes)
        lines.append(f"| {name}, ms | " + " | ".join(f"{s * 1000:.1f}" for s in seconds) + " |")
        lines.append(f"| {name}, x 1-token | " + " | ".join(f"{s / seconds[0]:.2f}" for s in seconds) + " |")
    return "\n".join(lines)
