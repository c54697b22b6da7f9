"""One decoder layer's 1-token step, then the final norm and LM head, as a function of its input, its
cache and its weights: the code AOTInductor compiles once and every layer calls.

The weight products read plain float weights as reductions, ``(x * W).sum(-1)``, that inductor
fuses into one kernel each: here 24-27 GB/s, against 10-23 for torch's and oneDNN's one-row
products. With 512-bit vectors int8 weights do too (widened inside the kernel; torch's int8 kernel
reads them at 11-14 GB/s), elsewhere they go through that kernel (see :class:`DecoderLayer`).
Their input is stored before the product (else inductor recomputes the layer norm for every weight
row: a 1.8x slower int8 step). int4 weights go through torch's weight-only kernel
(``core.runtime.weights.quantized``), the LM head through the last layer's call.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.runtime.weights.fused import HeadWeights, LayerWeights

HEAD_STAND_IN_ROWS = (
    2  # the head rows every layer but the last computes (see DecoderLayer); 0 and 1 would fix the shape
)


@dataclass(frozen=True)
class LayerSpec:
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
    fp32_products: bool  # products read fp32 input, int8 ones in fused reductions (see DecoderLayer)
    rows: bool = False  # the layer over any number of new tokens (``rows_layer.RowsLayer``), else the 1-token one
    code: int = 7  # the layers' version: a package compiled from older code is not loaded (3: every float
    # and int8 product a reduction; 4: the LM head inside, fp32 between the products; 5: the rows layer's
    # attention by row, with integer int8 products; 6: that attention through our kernel; 7: int8 on x86
    # through the int8 decoder, no integer rows layer)

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:24]


def layer_spec(model: Any, weights: LayerWeights, head: HeadWeights, *, rows: bool = False) -> LayerSpec:
    """The spec of ``model``'s 1-token layer (or, with ``rows``, its layer over any number of new tokens)
    with one layer's ``weights`` and the ``head``."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # inductor takes about a second to import: only when compiling

    config = model.config
    heads = config.num_attention_heads
    isa = pick_vec_isa()
    return LayerSpec(
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
        rows=rows,
    )


class DecoderLayer(nn.Module):
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

    def __init__(self, spec: LayerSpec) -> None:
        super().__init__()
        self.spec = spec

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        head_norm: torch.Tensor,
        head_weight: torch.Tensor,
        head_scales: torch.Tensor | None,
        head_bias: torch.Tensor | None,
        *tensors: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden`` ``[1, 1, hidden_size]`` after the layer, and the head's logits ``[1, rows]`` for it.
        ``keys`` and ``values``: the cache ``[length, kv_heads, head_dim]`` up to and including this
        token's slot, which is written here. ``head_*``: :data:`HeadWeights`; ``tensors``: a layer's
        :data:`LayerWeights`."""
        dtype = hidden.dtype
        hidden = self._layer(hidden, cos, sin, keys, values, tensors).to(dtype)
        logits = self._project(rms_norm(hidden, head_norm, self.spec.head_eps)[0], head_weight, head_scales, head_bias)
        return hidden, logits.to(dtype)

    def _layer(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        tensors: tuple[torch.Tensor | None, ...],
    ) -> torch.Tensor:
        """The layer in fp32; only the cache entries (and, without ``fp32_products``, the products'
        input) are rounded to the model's dtype."""
        spec = self.spec
        heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
        _project = self._project
        hidden = hidden.float()
        norm1, norm2, projections = layer_tensors(tensors)
        h = rms_norm(hidden, norm1, spec.eps)
        if len(projections) == 4:
            qkv, o, gate_up, down = projections
            q, k, v = _project(h, *qkv).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        else:
            q_proj, k_proj, v_proj, o, gate_proj, up_proj, down = projections
            q, k, v = _project(h, *q_proj), _project(h, *k_proj), _project(h, *v_proj)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = rotate(q.view(1, 1, heads, head_dim).transpose(1, 2), cos, sin)
        key = rotate(k.reshape(1, 1, kv_heads, head_dim).transpose(1, 2), cos, sin)
        keys[-1:] = key.view(1, kv_heads, head_dim)
        values[-1:] = v.reshape(1, kv_heads, head_dim)
        # One query: attention as reductions, which inductor fuses (no matrix-product calls).
        grouped = query.reshape(kv_heads, heads // kv_heads, 1, head_dim)
        scores = (grouped * keys.permute(1, 0, 2)[:, None].float()).sum(-1) * head_dim**-0.5
        weights = torch.softmax(scores, dim=-1)
        out = (weights[..., None] * values.permute(1, 0, 2)[:, None].float()).sum(-2)
        hidden = hidden + _project(out.reshape(1, 1, heads * head_dim), *o)
        h = rms_norm(hidden, norm2, spec.eps)
        if len(projections) == 4:
            gate, up = _project(h, *gate_up).chunk(2, dim=-1)
        else:
            gate, up = _project(h, *gate_proj), _project(h, *up_proj)
        return hidden + _project(F.silu(gate) * up, *down)

    def _project(
        self, x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``x`` (fp32) times the weight, in fp32 (see the class)."""
        fused = self.spec.fp32_products
        x = x if fused else x.to(self.spec.dtype)
        if weight.dtype == torch.uint8:  # int4, packed for the CPU kernel; scales and zeros [in / group, out, 2]
            assert scales is not None
            flat = x.reshape(-1, x.shape[-1]).to(scales.dtype)
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(
                flat, weight, flat.shape[-1] // scales.shape[0], scales
            ).float()
        elif scales is None:  # float weights: a reduction inductor fuses into one kernel per product
            out = (x.unsqueeze(-2) * weight).sum(-1, dtype=torch.float32)
        elif fused:  # int8, one scale per output channel: widened inside the same kernel
            out = (x.unsqueeze(-2) * weight.float()).sum(-1) * scales
        else:
            out = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), weight, scales.to(x.dtype)).float()
        out = out.reshape(*x.shape[:-1], out.shape[-1])
        return out if bias is None else out + bias


def layer_tensors(tensors: tuple[torch.Tensor | None, ...]) -> tuple[Any, Any, list[tuple[Any, Any, Any]]]:
    """A layer's :data:`LayerWeights` as its two norms and its projections' (weight, scales, bias): seven,
    or four where q, k, v and gate, up are joined."""
    norm1, norm2 = tensors[0], tensors[1]
    count = (len(tensors) - 2) // 3
    projections = [(tensors[2 + i], tensors[2 + count + i], tensors[2 + 2 * count + i]) for i in range(count)]
    return norm1, norm2, projections


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """In fp32, not rounded to the model's dtype (transformers' norm rounds its output)."""
    hidden = hidden.float()
    return weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
