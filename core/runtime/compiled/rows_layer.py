"""One decoder layer's step over any number of new tokens (lookahead's steps), then the final norm and
the LM head on the rows kept: the code AOTInductor compiles once, for any row count and cache length.

A lookahead step feeds a few to a few dozen tokens under a tree mask. Eager, such a step runs the
layer as some forty operators with their dispatch, and its int8 products widen every weight to the
activations' dtype before multiplying; compiled, the layer is one call whose products go through
kernels that load each weight once for all rows (torch's int8 kernel; oneDNN's and MKL's matrix
products for float weights) and whose attention is torch's fused kernel, under the step's mask. So the
step costs little more than a 1-token step until arithmetic catches up with reading the weights; the
curve is measured where the app runs (``core.autotune.measure``). (int8 models on x86-64 run the int8
decoder instead, :mod:`~core.runtime.compiled.int8_decoder`.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.runtime.compiled.layer import LayerSpec, layer_tensors, rms_norm, rotate

MAX_ROWS = 64
"""The widest step the compiled layer takes; wider ones (a prompt) run eager, as matrix products."""


class RowsLayer(nn.Module):
    """A decoder layer's step over ``q`` new tokens, as transformers computes it (``LlamaDecoderLayer``,
    attention under an additive mask), then the final norm and the LM head on the rows kept; its
    weights are inputs. Every layer but the last passes a stand-in head (see
    :class:`~core.runtime.compiled.layer.DecoderLayer`) and one row to keep.

    Norms, rotary embedding and residuals are computed in fp32, as in the 1-token layer. Float products
    read their input in the weights' dtype, int8 ones in the model's, and attention is torch's fused
    kernel, reading the cache in its dtype."""

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
        mask: torch.Tensor,
        rows: torch.Tensor,
        head_norm: torch.Tensor,
        head_weight: torch.Tensor,
        head_scales: torch.Tensor | None,
        head_bias: torch.Tensor | None,
        *tensors: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden`` ``[1, q, hidden_size]`` after the layer, and the head's logits ``[len(rows), vocabulary]``
        for the rows ``rows`` of it. ``keys`` and ``values``: the cache ``[length, kv_heads, head_dim]`` up
        to and including this step's ``q`` slots, which are written here; ``mask``: ``[q, length]``, additive."""
        spec = self.spec
        heads, kv_heads, head_dim = spec.heads, spec.kv_heads, spec.head_dim
        dtype, q, length = hidden.dtype, hidden.shape[1], keys.shape[0]
        x = hidden.float()
        norm1, norm2, projections = layer_tensors(tensors)
        joined = len(projections) == 4
        h = rms_norm(x, norm1, spec.eps)
        if joined:
            qkv, o, gate_up, down = projections
            sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
            query, key, value = _project(spec, h, *qkv).split(sizes, dim=-1)
        else:
            q_proj, k_proj, v_proj, o, gate_proj, up_proj, down = projections
            query, key, value = _project(spec, h, *q_proj), _project(spec, h, *k_proj), _project(spec, h, *v_proj)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = rotate(query.view(1, q, heads, head_dim).transpose(1, 2), cos, sin)
        key = rotate(key.view(1, q, kv_heads, head_dim).transpose(1, 2), cos, sin)
        keys[length - q :] = key[0].transpose(0, 1).to(keys.dtype)
        values[length - q :] = value.view(q, kv_heads, head_dim).to(values.dtype)
        out = F.scaled_dot_product_attention(
            query.to(keys.dtype),
            keys.permute(1, 0, 2)[None],
            values.permute(1, 0, 2)[None],
            attn_mask=mask.to(keys.dtype)[None, None],
            scale=head_dim**-0.5,
            enable_gqa=heads > kv_heads,
        )
        x = x + _project(spec, out.transpose(1, 2).reshape(1, q, heads * head_dim).float(), *o)
        h = rms_norm(x, norm2, spec.eps)
        if joined:
            gate, up = _project(spec, h, *gate_up).chunk(2, dim=-1)
        else:
            gate, up = _project(spec, h, *gate_proj), _project(spec, h, *up_proj)
        x = (x + _project(spec, F.silu(gate) * up, *down)).to(dtype)
        kept = rms_norm(x[0].index_select(0, rows), head_norm, spec.head_eps)
        return x, _project(spec, kept, head_weight, head_scales, head_bias).to(dtype)


def _project(
    spec: LayerSpec, x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x`` (fp32, any leading shape) times the weight, in fp32, through a kernel that reuses each
    loaded weight across rows: int8 weights through torch's, which reads ``x`` in the model's dtype (bf16
    for the app's int8)."""
    flat = x.reshape(-1, x.shape[-1])
    if weight.dtype == torch.uint8:  # int4, packed for the CPU kernel; scales and zeros [in / group, out, 2]
        assert scales is not None
        flat = flat.to(scales.dtype)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, weight, flat.shape[-1] // scales.shape[0], scales)
    elif scales is None:
        out = torch.mm(flat.to(weight.dtype), weight.t())
    else:  # int8, one scale per output channel
        flat = flat.to(spec.dtype)
        out = torch._weight_int8pack_mm(flat, weight, scales.to(spec.dtype))
    out = out.float().reshape(*x.shape[:-1], out.shape[-1])
    return out if bias is None else out + bias
