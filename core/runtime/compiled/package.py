"""Compiling a decoder layer's step into a package (AOTInductor), and the package cache.

Compiling costs one layer's worth (10-14 s for the default model here, mostly the C++ compiler;
calibration compiles two variants side by side, :mod:`core.runtime.compiled.parallel`). A package is
kept in inductor's cache folder, keyed by what the code depends on (:class:`~core.runtime.compiled.layer.LayerSpec`:
shapes, dtypes, threads, torch, the processor's vector instructions, the layer code's own version),
so a later start loads it in milliseconds.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.runtime.compiled import kernels
from core.runtime.compiled.int8_decoder import why_not_int8_decoder
from core.runtime.compiled.layer import HEAD_STAND_IN_ROWS, DecoderLayer, LayerSpec, layer_spec
from core.runtime.compiled.rows_layer import MAX_ROWS, RowsLayer
from core.runtime.compiled.toolchain import cache_dir, quiet_torch, vector_isa_from_flags
from core.runtime.weights.fused import fuse_projections, head_weights, layer_weights

log = logging.getLogger(__name__)

LayerRunner = Callable[[list[torch.Tensor]], list[torch.Tensor]]
"""A compiled layer: ``[hidden, cos, sin, keys, values, *head, *weights]`` (the rows layer: ``mask, rows``
after ``values``; ``None`` tensors left out) in, ``[hidden, logits]`` out; see
:class:`~core.runtime.compiled.layer.DecoderLayer` and :class:`~core.runtime.compiled.rows_layer.RowsLayer`."""
_WARM_UP_START = 5  # cache entries before the warm-up step
_WARM_UP_ROWS = 4  # the rows layer's example step: 0 and 1 would fix the row count


@dataclass(frozen=True)
class CompileJob:
    """What compiling a model's layer takes: what the code depends on, example inputs (the scratch
    buffers, the head's and the first layer's tensors) and the package's path."""

    spec: LayerSpec
    inputs: tuple[torch.Tensor | None, ...]
    path: Path


@dataclass(frozen=True)
class KernelsJob:
    """Building our kernels (what the int8 decoder needs instead of packages) into ``path``."""

    path: Path


def compile_jobs(model: Any) -> tuple[CompileJob | KernelsJob, ...]:
    """The compile jobs of a model :func:`~core.runtime.compiled.step.why_not_compilable` accepts (its
    projections joined first): its 1-token layer and its layer over any number of new tokens, or where
    the int8 decoder runs it (:mod:`~core.runtime.compiled.int8_decoder`), building our kernels."""
    fuse_projections(model)
    if why_not_int8_decoder(model) is None:
        return (KernelsJob(kernels.library_path()),)
    return (compile_job(model, rows=False), compile_job(model, rows=True))


def run_job(job: CompileJob | KernelsJob) -> None:
    """Compile a package, or build the kernels (what a compiling child does)."""
    if isinstance(job, KernelsJob):
        kernels.build(job.path)
    else:
        torch.set_num_threads(job.spec.threads)  # inductor's kernels are compiled for the parent's thread count
        compile_package(job)


def compile_job(model: Any, *, rows: bool) -> CompileJob:
    """The compile job of ``model``'s 1-token layer, or with ``rows`` its layer over any number of new tokens."""
    fuse_projections(model)
    weights, head = layer_weights(model), head_weights(model)
    assert weights is not None and head is not None
    with vector_isa_from_flags():
        spec = layer_spec(model, weights[0], head, rows=rows)
    inputs = (*scratch_inputs(model, rows=rows), *head, *weights[0])
    return CompileJob(spec, inputs, package_dir() / f"layer-{spec.key}.pt2")


def package_dir() -> Path:
    return cache_dir() / "lookahead-steps"


def _runner(path: Path) -> LayerRunner:
    """A package's compiled code, called directly: its Python ``__call__`` reads the call's tree spec
    again on every call (25 us a layer here, 0.75 ms a step for 30 layers)."""
    with quiet_torch():
        return torch._inductor.aoti_load_package(str(path)).loader.run


def load_package(job: CompileJob) -> LayerRunner | None:
    """A job's stored package, or ``None`` (and the file removed) where it does not load."""
    path = job.path
    try:
        return _runner(path)
    except Exception as err:  # a truncated or foreign file: compile it again
        log.warning("compiling the decoding step again: %s does not load (%s)", path.name, err)
        path.unlink(missing_ok=True)
        return None


def compile_package(job: CompileJob) -> LayerRunner:
    """Export the layer for any cache length and compile it ahead of time (AOTInductor) into ``job.path``.

    Ahead-of-time code runs without dynamo's guards and Python wrapper: a fifth less time per layer
    than ``torch.compile`` of the same function here. Compiling runs in this process (no worker
    pool, which in an installed app would start the app again)."""
    import torch._inductor.config as inductor_config  # inductor takes about a second to import: only when compiling
    from torch.export import Dim

    inputs, path, rows = job.inputs, job.path, job.spec.rows
    length, vocabulary = Dim("length", min=2, max=1 << 20), Dim("vocabulary", min=HEAD_STAND_IN_ROWS, max=1 << 24)
    step: tuple[Any, ...] = (None, None, None, {0: length}, {0: length})
    if rows:  # any number of new tokens and of rows kept
        tokens, kept = Dim("tokens", min=1, max=MAX_ROWS), Dim("kept", min=1, max=MAX_ROWS)
        step = ({1: tokens}, {1: tokens}, {1: tokens}, {0: length}, {0: length}, {0: tokens, 1: length}, {0: kept})
    first_head = len(step)
    head = (None, *({0: vocabulary} if t is not None else None for t in inputs[first_head + 1 : first_head + 4]))
    shapes = (*step, *head, (None,) * (len(inputs) - first_head - 4))  # the last: *tensors
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
    try:
        # realize_acc_reads_threshold: store every operator's result that reads more than two tensors
        # (the layer norms), so that the weight products read it instead of recomputing it per row.
        # No precompiled headers: building them (two, 140 MB each, in the system's temporary folder)
        # made a first start 7 s longer, and they save a later compile less (packages are kept).
        options = {"compile_threads": 1, "realize_acc_reads_threshold": 2, "aot_inductor.precompile_headers": False}
        with torch.no_grad(), vector_isa_from_flags(), inductor_config.patch(options):
            layer = RowsLayer(job.spec) if rows else DecoderLayer(job.spec)
            program = torch.export.export(layer, inputs, dynamic_shapes=shapes)
            torch._inductor.aoti_compile_and_package(program, package_path=str(partial))
        partial.replace(path)  # whole or not at all: another start never loads half a package
    finally:
        partial.unlink(missing_ok=True)  # what a failed compile left
    return _runner(path)


def scratch_inputs(model: Any, *, rows: bool) -> tuple[torch.Tensor, ...]:
    """A step's input, rotary tables and zeroed cache ``[_WARM_UP_START + tokens, kv_heads, head_dim]``:
    of 1 token, or with ``rows`` of :data:`_WARM_UP_ROWS` tokens (then also its mask and the rows kept)."""
    config = model.config
    dtype = model.get_input_embeddings().weight.dtype
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    tokens = _WARM_UP_ROWS if rows else 1
    shape = (_WARM_UP_START + tokens, config.num_key_value_heads, head_dim)
    inner = model.model
    with torch.no_grad():
        hidden = inner.embed_tokens(torch.zeros(1, tokens, dtype=torch.long))
        positions = torch.arange(_WARM_UP_START, _WARM_UP_START + tokens)[None]
        cos, sin = inner.rotary_emb(hidden, position_ids=positions)
    step = (hidden, cos, sin, torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
    if not rows:
        return step
    return *step, torch.zeros(tokens, shape[0], dtype=dtype), torch.arange(HEAD_STAND_IN_ROWS)
