"""A compiled 1-token decoding step for the CPU: one decoder layer as one inductor graph, reused by every layer.

Eager PyTorch runs a decoder layer as some forty small operators (norms, rotary, residuals, SiLU,
the cache write, attention), each with its own dispatch; at a few milliseconds per 1-token step
for a 30-layer model, that is much of the step. Here the layer is a pure function of its input,
its cache buffers and its weights, compiled once by ``torch.compile`` (inductor, dynamic shapes:
any cache length) and called for each layer with that layer's weights, so compiling costs one
layer's worth (about 13 s for the default model here, 2 s once inductor's disk cache has it).

The weight products run on the plain weights with oneDNN switched off around the step: torch's
own kernels read a single row's weights fastest in half precision (see ``core.models.cpu_packed``),
so the step needs plain weights (layout ``plain`` or ``packed+rows``) or int8 / int4 ones
(``core.models.cpu_quant``, through torch's weight-only kernels). Lookahead's wider steps stay
eager, on the packed weights. Whether compiling pays (it needs a C++ compiler, and inductor's code
is not faster everywhere) is measured where the app runs: :func:`choose_compiled_step`.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

COMPILED_MARGIN = 1.03  # the compiled 1-token step must be this much cheaper than the eager one to be kept
_COMPILED: "weakref.WeakKeyDictionary[Any, Callable[..., torch.Tensor]]" = weakref.WeakKeyDictionary()  # model -> layer
MIN_CACHED = 2  # the compiled step runs after this many cached tokens: 0 and 1 would each be compiled apart
_WARM_UP_START = 5  # cache entries before the warm-up token


LayerWeights = tuple[torch.Tensor | None, ...]
"""One decoder layer's tensors, in the order the compiled function takes them: two norms, then the seven
projections' (q, k, v, o, gate, up, down) weights, their scales and their biases (``None`` where absent)."""


def set_compile_cache(cache_dir: Path) -> None:
    """Keep inductor's compiled code under the app's cache folder (unless the user chose a folder)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))


def why_not_compilable(model: Any) -> str | None:
    """Why the compiled step cannot run ``model`` (``None`` when it can)."""
    from core.lookahead.llama_step import supports_llama_step

    if not supports_llama_step(model):
        return "not a LLaMA-family model the lean step runs"
    if model.device.type != "cpu":
        return "the compiled step is for the CPU"
    if getattr(model.config, "hidden_act", None) not in ("silu", "swish"):
        return f"activation {model.config.hidden_act!r}"
    if layer_weights(model) is None:
        return "packed-only or unknown quantized weights (it needs plain float, int8 or int4 weights)"
    return None


def layer_weights(model: Any) -> list[LayerWeights] | None:
    """Every layer's norms, then its seven projections' weights, int8 or int4 scales (``None`` for
    float weights) and biases; ``None`` if a projection has no weight the compiled step can read."""
    result = []
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        projections = [_projection(linear) for linear in linears]
        if any(p is None for p in projections):
            return None
        weights = [p[0] for p in projections if p is not None]
        scales = [p[1] for p in projections if p is not None]
        biases = [getattr(linear, "bias", None) for linear in linears]
        norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
        result.append((*norms, *weights, *scales, *biases))
    return result


def _projection(linear: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight, scales or ``None``): a plain ``nn.Linear``'s float weight, the one-row copy of a
    packed layer (``core.models.cpu_packed``), or an int8 or int4 layer's weight and scales
    (``core.models.cpu_quant``)."""
    if type(linear) is nn.Linear and linear.weight.is_floating_point():
        return linear.weight, None
    qweight, scales = getattr(linear, "qweight", None), getattr(linear, "scales", None)
    if qweight is not None and scales is not None and qweight.dtype == torch.int8:
        return qweight, scales
    int4, scales_and_zeros = getattr(linear, "packed", None), getattr(linear, "scales_and_zeros", None)
    if int4 is not None and scales_and_zeros is not None:
        return int4, scales_and_zeros
    weight = getattr(linear, "one_row_weight", None)
    return (weight, None) if weight is not None else None


@contextmanager
def one_row_kernels() -> Iterator[None]:
    """oneDNN switched off: products of one row of half-precision input then run on torch's own, faster kernels."""
    enabled, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


def _layer_function(model: Any) -> Callable[..., torch.Tensor]:
    """The decoder layer of a 1-token step, as transformers computes it (``LlamaDecoderLayer``)."""
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    groups, scaling = heads // kv_heads, head_dim**-0.5
    eps = float(model.model.layers[0].input_layernorm.variance_epsilon)

    def rms_norm(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
        return weight * hidden.to(dtype)

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def project(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
        if scales is None:
            return F.linear(x, weight, bias)
        flat = x.reshape(-1, x.shape[-1])
        if weight.dtype == torch.int8:  # one scale per output channel
            out = torch._weight_int8pack_mm(flat, weight, scales)
        else:  # int4 packed for the CPU kernel; scales and zeros [in / group, out, 2]
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, weight, flat.shape[-1] // scales.shape[0], scales)
        out = out.reshape(*x.shape[:-1], out.shape[-1])
        return out if bias is None else out + bias

    def decode_layer(
        hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int,
        *tensors: torch.Tensor | None,
    ) -> torch.Tensor:
        """``hidden`` ``[1, 1, hidden_size]`` after the layer; the token's key and value go to slot ``start``.
        ``tensors``: a layer's :data:`LayerWeights`."""
        norm1, norm2 = tensors[0], tensors[1]
        q, k, v, o, gate, up, down = ((tensors[2 + i], tensors[9 + i], tensors[16 + i]) for i in range(7))
        h = rms_norm(hidden, norm1)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = rotate(project(h, *q).view(1, 1, heads, head_dim).transpose(1, 2), cos, sin)
        key = rotate(project(h, *k).view(1, 1, kv_heads, head_dim).transpose(1, 2), cos, sin)
        value = project(h, *v).view(1, 1, kv_heads, head_dim).transpose(1, 2)
        keys[:, :, start : start + 1] = key
        values[:, :, start : start + 1] = value
        cached_keys, cached_values = keys[:, :, : start + 1], values[:, :, : start + 1]
        # One query: attention as fp32 reductions, which inductor fuses (no matrix-product calls).
        grouped = query.reshape(1, kv_heads, groups, 1, head_dim).float()
        scores = (grouped * cached_keys[:, :, None].float()).sum(-1) * scaling
        weights = torch.softmax(scores, dim=-1)
        out = (weights[..., None] * cached_values[:, :, None].float()).sum(-2).to(hidden.dtype)
        hidden = hidden + project(out.reshape(1, 1, heads * head_dim), *o)
        h = rms_norm(hidden, norm2)
        return hidden + project(F.silu(project(h, *gate)) * project(h, *up), *down)

    return _own_code(decode_layer)


def _own_code(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``function`` with a code object of its own. Dynamo keeps its compiled entries on the code object,
    at most ``recompile_limit`` (8) of them: shared by every model, a process that loads a few models
    (switching models in the app, the tests) would run out, and its next model would stay eager."""
    code = function.__code__.replace()
    assert code is not function.__code__
    return types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__,
                              function.__closure__)


def compile_step(model: Any) -> str | None:
    """Compile the 1-token layer for ``model`` now (a warm-up step on scratch buffers) and attach it.

    Returns ``None`` on success, else why it cannot (the model then keeps the eager step). Compiling
    needs a C++ compiler; any failure of inductor is caught and reported here.
    """
    reason = why_not_compilable(model)
    if reason is not None:
        return reason
    try:
        import torch._inductor.config as inductor_config

        compiled = torch.compile(_layer_function(model), dynamic=True, fullgraph=True)
        # In this process: no pool of compile workers (in an installed app those would start the app again)
        with inductor_config.patch(compile_threads=1):
            _warm_up(model, compiled)
    except Exception as err:  # noqa: BLE001 - inductor raises many kinds (no compiler, no headers); eager still answers
        log.warning("the decoding step stays eager: compiling it failed: %s", err)
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        return f"compiling failed: {type(err).__name__}: {first_line}"
    _COMPILED[model] = compiled
    return None


def _warm_up(model: Any, compiled: Callable[..., torch.Tensor]) -> None:
    weights = layer_weights(model)
    assert weights is not None
    config = model.config
    dtype = model.get_input_embeddings().weight.dtype
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (1, config.num_key_value_heads, _WARM_UP_START + 3, head_dim)
    inner = model.model
    with torch.inference_mode(), one_row_kernels():
        keys, values = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
        hidden = inner.embed_tokens(torch.tensor([[0]]))
        cos, sin = inner.rotary_emb(hidden, position_ids=torch.tensor([[_WARM_UP_START]]))
        compiled(hidden, cos, sin, keys, values, _WARM_UP_START, *weights[0])


def compile_errors() -> tuple[type[BaseException], ...]:
    """What a compiled call raises when compiling again fails (a recompilation on new shapes): not
    out of memory or other errors of the computation itself, which must reach the caller."""
    from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException

    return TorchDynamoException, FailOnRecompileLimitHit


def compiled_layer(model: Any) -> Callable[..., torch.Tensor] | None:
    """The compiled layer function attached by :func:`compile_step`, if any."""
    return _COMPILED.get(model)


def drop_compiled_step(model: Any) -> None:
    """Back to the eager 1-token step."""
    _COMPILED.pop(model, None)


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
    return True
