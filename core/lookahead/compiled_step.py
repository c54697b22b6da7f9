"""A compiled 1-token decoding step for the CPU: one decoder layer as ahead-of-time compiled code, reused by every layer.

Eager PyTorch runs a decoder layer as some forty small operators (norms, rotary, residuals, SiLU,
the cache write, attention), each with its own dispatch; at a few milliseconds per 1-token step
for a 30-layer model, that is much of the step. Here the layer is a function of its input, its
cache and its weights, exported for any cache length and compiled by AOTInductor into a package
(a shared library) that every layer calls with its own weights. Compiling costs one layer's worth
(10-14 s for the default model here; calibration compiles two variants side by side,
``core.lookahead.parallel_compile``); the package is kept in inductor's cache folder, keyed by
what the code depends on (shapes, dtypes, threads, torch, the processor's vector instructions, the
layer code's own version), so a later start loads it in milliseconds.

The weight products read plain float weights as reductions, ``(x * W).sum(-1)``, that inductor
fuses into one kernel each: here 24-27 GB/s, against 10-23 for torch's and oneDNN's one-row
products. With 512-bit vectors int8 weights do too (widened inside the kernel; torch's int8 kernel
reads them at 11-14 GB/s), elsewhere they go through that kernel (see :class:`_DecoderLayer`).
Their input is stored before the product (else inductor recomputes the layer norm for every weight
row: a 1.8x slower int8 step). int4 weights go through torch's weight-only kernel
(``core.models.cpu_quant``), the LM head through the last layer's call. So the
step needs plain weights (layout ``plain`` or ``packed+rows``) or quantized ones. Lookahead's
wider steps stay eager, on the packed weights. Whether compiling pays (it needs a C++ compiler, and
inductor's code is not faster everywhere) is measured where the app runs: :func:`choose_compiled_step`.
"""

from __future__ import annotations

import logging
import hashlib
import os
import platform
import statistics
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

COMPILED_MARGIN = 1.03  # the compiled 1-token step must be this much cheaper than the eager one to be kept
LayerRunner = Callable[[list[torch.Tensor]], list[torch.Tensor]]
"""A compiled layer: ``[hidden, cos, sin, keys, values, *head, *weights]`` (``None`` tensors left out) in,
``[hidden, logits]`` out; see :class:`_DecoderLayer`."""
HEAD_STAND_IN_ROWS = 2  # the head rows every layer but the last computes (see _DecoderLayer); 0 and 1 would fix the shape
MIN_CACHED = 1  # cached tokens before the compiled step runs: it takes a cache of 2 or more entries, this token's included
_WARM_UP_START = 5  # cache entries before the warm-up token


LayerWeights = tuple[torch.Tensor | None, ...]
"""One decoder layer's tensors, in the order the compiled layer takes them: two norms, then the projections'
weights, their scales and their biases (``None`` where absent); see :func:`layer_weights`."""
HeadWeights = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""The final norm's weight, then the LM head's weight, scales and bias (``None`` where absent); see :func:`head_weights`."""


def set_compile_cache(cache_dir: Path) -> None:
    """Keep inductor's compiled code and the step packages under the app's cache folder (unless the user
    chose a folder)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))


def why_not_compilable(model: Any, *, weights: bool = True) -> str | None:
    """Why the compiled step cannot run ``model`` (``None`` when it can); with ``weights=False``, only
    what its architecture and device allow (its weights might still be laid out for it)."""
    from core.lookahead.llama_step import supports_llama_step

    if not supports_llama_step(model):
        return "not a LLaMA-family model the lean step runs"
    if model.device.type != "cpu":
        return "the compiled step is for the CPU"
    if getattr(model.config, "hidden_act", None) not in ("silu", "swish"):
        return f"activation {model.config.hidden_act!r}"
    if weights and (layer_weights(model) is None or head_weights(model) is None):
        return "packed-only or unknown quantized weights (it needs plain float, int8 or int4 weights)"
    return None


def layer_weights(model: Any) -> list[LayerWeights] | None:
    """Every layer's norms, then its projections' weights, int8 or int4 scales (``None`` for float
    weights) and biases; ``None`` if a projection has no weight the compiled step can read.

    The projections are q, k, v, o, gate, up, down; or, once :func:`fuse_projections` joined them,
    qkv, o, gate_up, down."""
    fused = _fused(model)
    result = []
    for index, layer in enumerate(model.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        projections = [_projection(linear) for linear in linears]
        if any(p is None for p in projections):
            return None
        joined = [(p[0], p[1], getattr(linear, "bias", None)) for p, linear in zip(projections, linears) if p is not None]
        if fused is not None:
            qkv, gate_up = fused[index]
            joined = [qkv, joined[3], gate_up, joined[6]]
        norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
        result.append((*norms, *(p[0] for p in joined), *(p[1] for p in joined), *(p[2] for p in joined)))
    return result


def head_weights(model: Any) -> HeadWeights | None:
    """The final norm's and the LM head's tensors as the compiled layer takes them; ``None`` where the
    head has no weight it can read (int4 heads included: the app never makes one)."""
    head = model.lm_head
    projection = _projection(head) if _kind(head) != "int4" else None
    if projection is None:
        return None
    return model.model.norm.weight, projection[0], projection[1], getattr(head, "bias", None)


def _head_stand_in(head: HeadWeights) -> HeadWeights:
    """The head's first :data:`HEAD_STAND_IN_ROWS` output rows (views): what the layers before the last compute."""
    norm, weight, scales, bias = head
    rows = slice(0, HEAD_STAND_IN_ROWS)
    return norm, weight[rows], None if scales is None else scales[rows], None if bias is None else bias[rows]


Projection = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""A projection's weight, scales (``None`` for float weights) and bias (``None`` where absent)."""
_FUSED: "weakref.WeakKeyDictionary[Any, list[tuple[Projection, Projection]]]" = weakref.WeakKeyDictionary()


def fuse_projections(model: Any) -> None:
    """Join each layer's q, k and v weights, and its gate and up weights, into one tensor each: two
    one-row products instead of five (0.5 ms a step less for the default model here). The layers keep
    views of the joined tensors, so no memory is added. int8 weights join with their scales; int4
    weights (packed in blocks of output channels) stay apart, and so does a model with any layer
    that cannot join."""
    if _fused(model) is not None:
        return
    groups = [([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj], [layer.mlp.gate_proj, layer.mlp.up_proj])
              for layer in model.model.layers]
    if all(_joinable(linears) for pair in groups for linears in pair):
        _FUSED[model] = [(_join(qkv), _join(gate_up)) for qkv, gate_up in groups]


def _joinable(linears: list[nn.Module]) -> bool:
    kinds = {_kind(linear) for linear in linears}
    biases = {getattr(linear, "bias", None) is None for linear in linears}
    return len(kinds) == 1 and kinds <= {"float", "rows", "int8"} and len(biases) == 1


def _kind(linear: nn.Module) -> str | None:
    """How ``linear`` holds the weight the compiled step reads (see :func:`_projection`)."""
    if type(linear) is nn.Linear and linear.weight.is_floating_point():
        return "float"
    if getattr(linear, "qweight", None) is not None and linear.qweight.dtype == torch.int8:
        return "int8"
    if getattr(linear, "scales_and_zeros", None) is not None:
        return "int4"
    return "rows" if getattr(linear, "one_row_weight", None) is not None else None


def _join(linears: list[nn.Module]) -> Projection:
    """One projection for ``linears``; each of them then holds a view of it."""
    parts = [_projection(linear) for linear in linears]
    weight = torch.cat([p[0] for p in parts if p is not None])
    scales = None if parts[0] is None or parts[0][1] is None else torch.cat([p[1] for p in parts if p is not None])
    biases = [getattr(linear, "bias", None) for linear in linears]
    bias = None if biases[0] is None else torch.cat(biases)
    start = 0
    for linear in linears:
        rows = slice(start, start + linear.out_features)
        start = rows.stop
        kind = _kind(linear)
        if kind == "float":
            linear.weight = nn.Parameter(weight[rows], requires_grad=False)
        elif kind == "rows":
            linear.plain = weight[rows]
        else:
            assert scales is not None
            linear.qweight, linear.scales = weight[rows], scales[rows]
    return weight, scales, bias


def _fused(model: Any) -> list[tuple[Projection, Projection]] | None:
    """The joined projections, while the layers still hold views of them (not after ``model.to(...)``)."""
    joined = _FUSED.get(model)
    if joined is None:
        return None
    for layer, (qkv, gate_up) in zip(model.model.layers, joined):
        attn, mlp = layer.self_attn, layer.mlp
        for linears, weight in (([attn.q_proj, attn.k_proj, attn.v_proj], qkv[0]), ([mlp.gate_proj, mlp.up_proj], gate_up[0])):
            start = 0
            for linear in linears:
                part = _projection(linear)
                if part is None or part[0].data_ptr() != weight[start].data_ptr():
                    del _FUSED[model]
                    return None
                start += linear.out_features
    return joined


def _projection(linear: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight, scales or ``None``): a plain ``nn.Linear``'s float weight, the one-row copy of a
    packed layer (``core.models.cpu_packed``), or an int8 or int4 layer's weight and scales
    (``core.models.cpu_quant``)."""
    kind = _kind(linear)
    if kind == "float":
        return linear.weight, None
    if kind == "int8":
        return linear.qweight, linear.scales
    if kind == "int4":
        return linear.packed, linear.scales_and_zeros
    return (linear.one_row_weight, None) if kind == "rows" else None


@dataclass(frozen=True)
class _LayerSpec:
    """What the compiled code of a decoder layer depends on, besides its weights (inputs, not constants)."""

    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    head_eps: float  # the final norm's
    tensors: tuple[str, ...]  # per LayerWeights entry: its dtype and shape, or "-" where absent
    head: tuple[str, ...]  # per HeadWeights entry: its dtype and shape past the vocabulary (any size), or "-"
    threads: int  # inductor's kernels are compiled for a thread count
    machine: str  # torch version, processor and the vector instructions the kernels use
    dtype: torch.dtype  # the model's activations'
    fp32_products: bool  # products read fp32 input, int8 ones in fused reductions (see _DecoderLayer)
    code: int = 4  # :class:`_DecoderLayer`'s version: a package compiled from older code is not loaded
    # (3: every float and int8 product a reduction; 4: the LM head inside, fp32 between the products)

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:24]


_COMPILED: "weakref.WeakKeyDictionary[Any, tuple[_LayerSpec, LayerRunner]]" = weakref.WeakKeyDictionary()  # model ->


def _layer_spec(model: Any, weights: LayerWeights, head: HeadWeights) -> _LayerSpec:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    config = model.config
    heads = config.num_attention_heads
    isa = pick_vec_isa()
    return _LayerSpec(
        heads=heads,
        kv_heads=config.num_key_value_heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        eps=float(model.model.layers[0].input_layernorm.variance_epsilon),
        head_eps=float(model.model.norm.variance_epsilon),
        tensors=tuple("-" if t is None else f"{t.dtype}{list(t.shape)}" for t in weights),
        head=tuple("-" if t is None else f"{t.dtype}{list(t.shape[1:] if i else t.shape)}" for i, t in enumerate(head)),
        threads=torch.get_num_threads(),
        machine=f"{torch.__version__} {platform.machine()} {isa}",
        dtype=model.get_input_embeddings().weight.dtype,
        fp32_products=isa.bit_width() >= 512,
    )


class _DecoderLayer(nn.Module):
    """A decoder layer's 1-token step, as transformers computes it (``LlamaDecoderLayer``), then the final
    norm and the LM head on its output; its weights are inputs.

    The head is in the same compiled code so that it reads its weights as fast as the layers do (a
    second package would cost a second compile, some 5 s). Every layer but the last passes a stand-in
    head of :data:`HEAD_STAND_IN_ROWS` rows, whose logits are not used.

    The layer computes in fp32; what its products read depends on the vector instructions. With
    512-bit ones (AVX-512) they read fp32 input, and int8 weights too go through fused reductions
    (an int8 layer's products 119 us here, against 164 reading bf16 input and 223 through torch's
    int8 kernel). Narrower ones lack masked loads of bytes and half floats: inductor then reads a
    weight vector's worth at a time through a copy, and fp32 input (8 lanes, so 8 weights a load)
    made the compiled step 4-7x slower with AVX2. There the products read the input in the model's
    dtype (a whole vector of bf16 weights a load), and int8 weights go through torch's int8 kernel."""

    def __init__(self, spec: _LayerSpec) -> None:
        super().__init__()
        self.spec = spec

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        head_norm: torch.Tensor, head_weight: torch.Tensor, head_scales: torch.Tensor | None, head_bias: torch.Tensor | None,
        *tensors: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden`` ``[1, 1, hidden_size]`` after the layer, and the head's logits ``[1, rows]`` for it.
        ``keys`` and ``values``: the cache ``[length, kv_heads, head_dim]`` up to and including this
        token's slot, which is written here. ``head_*``: :data:`HeadWeights`; ``tensors``: a layer's
        :data:`LayerWeights`."""
        dtype = hidden.dtype
        hidden = self._layer(hidden, cos, sin, keys, values, tensors).to(dtype)
        logits = self._project(self._rms_norm(hidden, head_norm, self.spec.head_eps)[0], head_weight, head_scales, head_bias)
        return hidden, logits.to(dtype)

    def _layer(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        tensors: tuple[torch.Tensor | None, ...],
    ) -> torch.Tensor:
        """The layer in fp32; only the cache entries (and, without ``fp32_products``, the products'
        input) are rounded to the model's dtype."""
        spec = self.spec
        heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
        _project = self._project
        hidden = hidden.float()
        norm1, norm2 = tensors[0], tensors[1]
        count = (len(tensors) - 2) // 3  # 7 projections, or 4 where q, k, v and gate, up are joined
        projections = [(tensors[2 + i], tensors[2 + count + i], tensors[2 + 2 * count + i]) for i in range(count)]
        h = self._rms_norm(hidden, norm1, spec.eps)
        if count == 4:
            qkv, o, gate_up, down = projections
            q, k, v = _project(h, *qkv).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        else:
            q_proj, k_proj, v_proj, o, gate_proj, up_proj, down = projections
            q, k, v = _project(h, *q_proj), _project(h, *k_proj), _project(h, *v_proj)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = _rotate(q.view(1, 1, heads, head_dim).transpose(1, 2), cos, sin)
        key = _rotate(k.reshape(1, 1, kv_heads, head_dim).transpose(1, 2), cos, sin)
        keys[-1:] = key.view(1, kv_heads, head_dim)
        values[-1:] = v.reshape(1, kv_heads, head_dim)
        # One query: attention as reductions, which inductor fuses (no matrix-product calls).
        grouped = query.reshape(kv_heads, heads // kv_heads, 1, head_dim)
        scores = (grouped * keys.permute(1, 0, 2)[:, None].float()).sum(-1) * head_dim**-0.5
        weights = torch.softmax(scores, dim=-1)
        out = (weights[..., None] * values.permute(1, 0, 2)[:, None].float()).sum(-2)
        hidden = hidden + _project(out.reshape(1, 1, heads * head_dim), *o)
        h = self._rms_norm(hidden, norm2, spec.eps)
        if count == 4:
            gate, up = _project(h, *gate_up).chunk(2, dim=-1)
        else:
            gate, up = _project(h, *gate_proj), _project(h, *up_proj)
        return hidden + _project(F.silu(gate) * up, *down)

    def _project(self, x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
        """``x`` (fp32) times the weight, in fp32 (see the class)."""
        fused = self.spec.fp32_products
        x = x if fused else x.to(self.spec.dtype)
        if weight.dtype == torch.uint8:  # int4, packed for the CPU kernel; scales and zeros [in / group, out, 2]
            assert scales is not None
            flat = x.reshape(-1, x.shape[-1]).to(scales.dtype)
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, weight, flat.shape[-1] // scales.shape[0], scales).float()
        elif scales is None:  # float weights: a reduction inductor fuses into one kernel per product
            out = (x.unsqueeze(-2) * weight).sum(-1, dtype=torch.float32)
        elif fused:  # int8, one scale per output channel: widened inside the same kernel
            out = (x.unsqueeze(-2) * weight.float()).sum(-1) * scales
        else:
            out = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), weight, scales.to(x.dtype)).float()
        out = out.reshape(*x.shape[:-1], out.shape[-1])
        return out if bias is None else out + bias

    @staticmethod
    def _rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """In fp32, not rounded to the model's dtype (transformers' norm rounds its output)."""
        hidden = hidden.float()
        return weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def compile_step(model: Any) -> str | None:
    """Give ``model`` the compiled 1-token layer: from the package cache, else compiled now (and stored);
    then run it once on scratch buffers.

    Returns ``None`` on success, else why it cannot (the model then keeps the eager step). Compiling
    needs a C++ compiler; any failure of inductor is caught and reported here.
    """
    reason = why_not_compilable(model)
    if reason is not None:
        return reason
    try:
        job = compile_job(model)
        layer = (_load(job.path) if job.path.exists() else None) or compile_package(job)
        weights, head = layer_weights(model), head_weights(model)
        assert weights is not None and head is not None
        with torch.inference_mode():
            layer([*_scratch_inputs(model), *_present(_head_stand_in(head)), *_present(weights[0])])
    except Exception as err:  # noqa: BLE001 - inductor raises many kinds (no compiler, no headers); eager still answers
        log.warning("the decoding step stays eager: compiling it failed: %s", err)
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        return f"compiling failed: {type(err).__name__}: {first_line}"
    _COMPILED[model] = job.spec, layer
    return None


@dataclass(frozen=True)
class CompileJob:
    """What compiling a model's layer takes: what the code depends on, example inputs (the scratch
    buffers, the head's and the first layer's tensors) and the package's path."""

    spec: _LayerSpec
    inputs: tuple[torch.Tensor | None, ...]
    path: Path


def compile_job(model: Any) -> CompileJob:
    """The compile job of a model :func:`why_not_compilable` accepts (its projections joined first)."""
    fuse_projections(model)
    weights, head = layer_weights(model), head_weights(model)
    assert weights is not None and head is not None
    with _vector_isa_from_flags():
        spec = _layer_spec(model, weights[0], head)
    return CompileJob(spec, (*_scratch_inputs(model), *head, *weights[0]), _package_dir() / f"layer-{spec.key}.pt2")


@contextmanager
def _vector_isa_from_flags() -> Iterator[None]:
    """The vector instructions from the processor's flags: inductor's own probe compiles and loads a test
    program per instruction set (7.6 s at a first start here, 1.1 s later). A compiler that cannot
    build them fails the compile, and the step stays eager."""
    import torch._inductor.config as inductor_config

    with _quiet_torch(), inductor_config.patch({"cpp.vec_isa_ok": True}):
        yield


def _package_dir() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / "lookahead-steps"


def _present(weights: LayerWeights) -> tuple[torch.Tensor, ...]:
    return tuple(t for t in weights if t is not None)


def _runner(path: Path) -> LayerRunner:
    """A package's compiled code, called directly: its Python ``__call__`` reads the call's tree spec
    again on every call (25 us a layer here, 0.75 ms a step for 30 layers)."""
    with _quiet_torch():
        return torch._inductor.aoti_load_package(str(path)).loader.run


@contextmanager
def _quiet_torch() -> Iterator[None]:
    """Warnings from torch's own compiling code with nothing for the user: a deprecated pytree class in
    export and the package loader, and the missing Python headers (the compiled code does not use them;
    an installed app has none)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
        warnings.filterwarnings("ignore", message="Can't find Python.h", category=UserWarning)
        yield


def _load(path: Path) -> LayerRunner | None:
    """A stored package, or ``None`` (and the file removed) where it does not load."""
    try:
        return _runner(path)
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file: compile it again
        log.warning("compiling the decoding step again: %s does not load (%s)", path.name, err)
        path.unlink(missing_ok=True)
        return None


def compile_package(job: CompileJob) -> LayerRunner:
    """Export the layer for any cache length and compile it ahead of time (AOTInductor) into ``job.path``.

    Ahead-of-time code runs without dynamo's guards and Python wrapper: a fifth less time per layer
    than ``torch.compile`` of the same function here. Compiling runs in this process (no worker
    pool, which in an installed app would start the app again)."""
    import torch._inductor.config as inductor_config
    from torch.export import Dim

    inputs, path = job.inputs, job.path
    length, vocabulary = Dim("length", min=2, max=1 << 20), Dim("vocabulary", min=HEAD_STAND_IN_ROWS, max=1 << 24)
    head = (None, *({0: vocabulary} if t is not None else None for t in inputs[6:9]))  # any number of head rows
    shapes = (None, None, None, {0: length}, {0: length}, *head, (None,) * (len(inputs) - 9))  # the last: *tensors
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
    try:
        # realize_acc_reads_threshold: store every operator's result that reads more than two tensors
        # (the layer norms), so that the weight products read it instead of recomputing it per row.
        # No precompiled headers: building them (two, 140 MB each, in the system's temporary folder)
        # made a first start 7 s longer, and they save a later compile less (packages are kept).
        options = {"compile_threads": 1, "realize_acc_reads_threshold": 2, "aot_inductor.precompile_headers": False}
        with torch.no_grad(), _vector_isa_from_flags(), inductor_config.patch(options):
            program = torch.export.export(_DecoderLayer(job.spec), inputs, dynamic_shapes=shapes)
            torch._inductor.aoti_compile_and_package(program, package_path=str(partial))
        partial.replace(path)  # whole or not at all: another start never loads half a package
    finally:
        partial.unlink(missing_ok=True)  # what a failed compile left
    return _runner(path)


def _scratch_inputs(model: Any) -> tuple[torch.Tensor, ...]:
    """A 1-token step's input, rotary tables and zeroed cache ``[_WARM_UP_START + 1, kv_heads, head_dim]``."""
    config = model.config
    dtype = model.get_input_embeddings().weight.dtype
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (_WARM_UP_START + 1, config.num_key_value_heads, head_dim)
    inner = model.model
    with torch.no_grad():
        hidden = inner.embed_tokens(torch.tensor([[0]]))
        cos, sin = inner.rotary_emb(hidden, position_ids=torch.tensor([[_WARM_UP_START]]))
    return hidden, cos, sin, torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)


def compiled_layer(model: Any) -> LayerRunner | None:
    """The compiled layer attached by :func:`compile_step`, if any."""
    attached = _COMPILED.get(model)
    return attached[1] if attached is not None else None


@dataclass(frozen=True)
class CompiledStep:
    """The compiled layer and the tensors each call takes after ``[hidden, cos, sin, keys, values]``."""

    layer: LayerRunner
    layers: list[tuple[torch.Tensor, ...]]  # every layer's weights
    head: tuple[torch.Tensor, ...]  # the final norm and LM head (for the last layer)
    stand_in: tuple[torch.Tensor, ...]  # a few of the head's rows (for the others)


def compiled_weights(model: Any) -> CompiledStep | None:
    """The compiled layer and every layer's weights as it takes them; ``None`` (eager) when none is
    attached, or when the model changed since it was compiled (converted to another dtype, say)."""
    attached = _COMPILED.get(model)
    weights = layer_weights(model) if attached is not None else None
    head = head_weights(model) if attached is not None else None
    if attached is None or weights is None or head is None:
        return None
    spec, layer = attached
    if any(_layer_spec(model, w, head) != spec for w in weights):
        log.warning("the decoding step runs eager: the model changed since its step was compiled")
        drop_compiled_step(model)
        return None
    return CompiledStep(layer, [_present(w) for w in weights], _present(head), _present(_head_stand_in(head)))


def drop_compiled_step(model: Any) -> None:
    """Back to the eager 1-token step."""
    _COMPILED.pop(model, None)


_KEPT_SECONDS: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def kept_step_seconds(model: Any) -> float | None:
    """The median seconds of the compiled 1-token step :func:`choose_compiled_step` measured and kept for
    ``model`` (``None`` where it kept none)."""
    return _KEPT_SECONDS.get(model) if compiled_layer(model) is not None else None


def choose_compiled_step(model: Any, cancelled: Callable[[], bool] | None = None, rounds: int = 12) -> bool:
    """Compile the 1-token step and keep it only if it measures faster than the eager one here.

    The two steps alternate over the same cached context, so that machine noise hits both alike.
    """
    from core.lookahead.auto import Cancelled
    from core.lookahead.llama_step import LlamaStep

    if compiled_layer(model) is not None:
        return True
    if why_not_compilable(model) is not None:
        return False
    context = 128
    eager = LlamaStep(model, context + 2)  # built before the compiled layer is attached: it stays eager
    reason = compile_step(model)
    if reason is not None:
        log.info("the 1-token step stays eager: %s", reason)
        return False
    compiled = LlamaStep(model, context + 2)
    ids = torch.randint(0, model.config.vocab_size, (context + 1,), generator=torch.Generator().manual_seed(0))
    times: dict[int, list[float]] = {0: [], 1: []}
    with torch.inference_mode():
        for step in (eager, compiled):
            step.forward(ids[:context], torch.arange(context), 1)
        for r in range(rounds + 1):
            for which, step in enumerate((eager, compiled)):
                if cancelled is not None and cancelled():
                    drop_compiled_step(model)
                    raise Cancelled
                start = time.perf_counter()
                step.forward(ids[context:], torch.tensor([context]), 1)
                if r:  # the first round warms up
                    times[which].append(time.perf_counter() - start)
                step.keep(context - 1, 2, [])
    eager_s, compiled_s = (statistics.median(times[w]) for w in (0, 1))
    log.info("1-token step: eager %.1f ms, compiled %.1f ms", 1000 * eager_s, 1000 * compiled_s)
    if compiled_s * COMPILED_MARGIN > eager_s:
        drop_compiled_step(model)
        return False
    _KEPT_SECONDS[model] = compiled_s
    return True
