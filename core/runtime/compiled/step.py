"""Compiled decoding steps for the CPU: one decoder layer as ahead-of-time compiled code, reused by every layer.

Eager PyTorch runs a decoder layer as some forty small operators (norms, rotary, residuals, SiLU,
the cache write, attention), each with its own dispatch; at a few milliseconds per 1-token step
for a 30-layer model, that is much of the step. Here the layer is a function of its input, its
cache and its weights (:mod:`core.runtime.compiled.layer`), compiled once into a package
(:mod:`core.runtime.compiled.package`) that every layer calls with its own weights: one for 1-token
steps (:mod:`~core.runtime.compiled.layer`), one for lookahead's wider steps
(:mod:`~core.runtime.compiled.rows_layer`). So the step needs plain weights (layout ``plain`` or
``packed+rows``) or quantized ones. int8 models on x86-64 run every step through our kernel instead
(:mod:`~core.runtime.compiled.int8_decoder`), which needs no package. Whether each pays is measured
where the app runs (``core.autotune``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from core.runtime.architecture import supports_llama_step
from core.runtime.compiled import kernels
from core.runtime.compiled.int8_decoder import Int8Decoder, why_not_int8_decoder
from core.runtime.compiled.layer import HEAD_STAND_IN_ROWS, LayerSpec, layer_spec
from core.runtime.compiled.package import (
    LayerRunner,
    compile_jobs,
    compile_package,
    load_package,
    scratch_inputs,
)
from core.runtime.weights.fused import HeadWeights, LayerWeights, fuse_projections, head_weights, layer_weights

log = logging.getLogger(__name__)

MIN_CACHED = (
    1  # cached tokens before the compiled step runs: it takes a cache of 2 or more entries, this token's included
)


def why_not_compilable(model: Any, *, weights: bool = True) -> str | None:
    """Why the compiled step cannot run ``model`` (``None`` when it can); with ``weights=False``, only
    what its architecture and device allow (its weights might still be laid out for it)."""
    if not supports_llama_step(model):
        return "not a LLaMA-family model the lean step runs"
    if model.device.type != "cpu":
        return "the compiled step is for the CPU"
    if getattr(model.config, "hidden_act", None) not in ("silu", "swish"):
        return f"activation {model.config.hidden_act!r}"
    if weights and (layer_weights(model) is None or head_weights(model) is None):
        return "packed-only or unknown quantized weights (it needs plain float, int8 or int4 weights)"
    return None


@dataclass(frozen=True)
class CompiledInputs:
    """The compiled layers and the tensors each call takes after the step's own inputs, or the int8 decoder."""

    one_token: LayerRunner | None  # 1-token steps (``None``: eager)
    rows: (
        LayerRunner | None
    )  # steps of 2 to :data:`~core.runtime.compiled.rows_layer.MAX_ROWS` new tokens (``None``: eager)
    layers: list[tuple[torch.Tensor, ...]]  # every layer's weights
    head: tuple[torch.Tensor, ...]  # the final norm and LM head (for the last layer)
    stand_in: tuple[torch.Tensor, ...]  # a few of the head's rows (for the others)
    decoder: Int8Decoder | None = None  # every step, the prompt's included (the layers are then ``None``)


@dataclass(frozen=True)
class CompiledLayer:
    """A compiled layer and the spec it was compiled for."""

    spec: LayerSpec
    run: LayerRunner


@dataclass(frozen=True)
class CompiledStep:
    """A model's compiled layers: for 1-token steps, and for steps of more new tokens (lookahead's); a
    ``None`` one leaves those steps eager (where it did not measure faster, say). Or, for an int8 model on
    x86-64, the int8 decoder, which runs every step (it counts as the rows layer: lookahead's steps run it)."""

    one_token: CompiledLayer | None
    rows: CompiledLayer | None
    decoder: Int8Decoder | None = None

    def only(self, *, one_token: bool, rows: bool) -> CompiledStep | None:
        """This step with only the layers asked for (``None`` when that leaves none)."""
        if self.decoder is not None:
            return self if rows else None
        kept = CompiledStep(self.one_token if one_token else None, self.rows if rows else None)
        return kept if kept.one_token is not None or kept.rows is not None else None

    def inputs(self, model: Any) -> CompiledInputs | None:
        """The layers with every layer's weights of ``model`` as they take them; ``None`` (eager) when the
        model changed since they were compiled (converted to another dtype, say)."""
        if self.decoder is not None:
            if not self.decoder.reads(model):
                log.warning("the decoding step runs eager: the model changed since its int8 decoder was made")
                return None
            return CompiledInputs(None, None, [], (), (), self.decoder)
        weights, head = layer_weights(model), head_weights(model)
        layers = [layer for layer in (self.one_token, self.rows) if layer is not None]
        if (
            weights is None
            or head is None
            or any(layer_spec(model, w, head, rows=layer.spec.rows) != layer.spec for layer in layers for w in weights)
        ):
            log.warning("the decoding step runs eager: the model changed since its step was compiled")
            return None
        return CompiledInputs(
            None if self.one_token is None else self.one_token.run,
            None if self.rows is None else self.rows.run,
            [present(w) for w in weights],
            present(head),
            present(head_stand_in(head)),
        )


def compile_step(model: Any) -> CompiledStep | str:
    """The compiled layers of ``model`` (for 1-token steps and for wider ones): from the package cache,
    else compiled now (and stored); each run once on scratch buffers. Joins the model's projections
    first (``core.runtime.weights.fused``). An int8 model our kernels run gets the int8 decoder instead
    (the kernels built now where they are not yet).

    Returns why it cannot, where it cannot (the model then keeps the eager step). Compiling needs a C++
    compiler; any failure of inductor is caught and reported here.
    """
    reason = why_not_compilable(model)
    if reason is not None:
        return reason
    fuse_projections(model)
    if why_not_int8_decoder(model) is None:
        try:
            kernels.load()
        except Exception as err:  # no compiler, say; eager still answers
            return _failed("building our kernels", err)
        return CompiledStep(None, None, Int8Decoder.of(model))
    try:
        layers = []
        for job in compile_jobs(model):
            run = (load_package(job) if job.path.exists() else None) or compile_package(job)
            weights, head = layer_weights(model), head_weights(model)
            assert weights is not None and head is not None
            with torch.inference_mode():
                run([*scratch_inputs(model, rows=job.spec.rows), *present(head_stand_in(head)), *present(weights[0])])
            layers.append(CompiledLayer(job.spec, run))
    except Exception as err:  # inductor raises many kinds (no compiler, no headers); eager still answers
        return _failed("compiling", err)
    one_token = next((layer for layer in layers if not layer.spec.rows), None)
    return CompiledStep(one_token, next(layer for layer in layers if layer.spec.rows))


def _failed(what: str, err: Exception) -> str:
    """Why the step stays eager after ``what`` raised ``err``: logged, and the first line for the caller."""
    log.warning("the decoding step stays eager: %s failed: %s", what, err)
    first_line = (str(err).strip().splitlines() or [""])[0][:200]
    return f"{what} failed: {type(err).__name__}: {first_line}"


def head_stand_in(head: HeadWeights) -> HeadWeights:
    """The head's first :data:`HEAD_STAND_IN_ROWS` output rows (views): what the layers before the last compute."""
    norm, weight, scales, bias = head
    rows = slice(0, HEAD_STAND_IN_ROWS)
    return norm, weight[rows], None if scales is None else scales[rows], None if bias is None else bias[rows]


def present(weights: LayerWeights | HeadWeights) -> tuple[torch.Tensor, ...]:
    """The tensors the compiled layer takes: ``None`` entries left out."""
    return tuple(t for t in weights if t is not None)
