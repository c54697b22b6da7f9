"""The weights a compiled layer reads: each projection's tensors, q/k/v and gate/up joined into one.

Joining q, k and v, and gate and up, makes two one-row products of five (0.5 ms a step less for the
default model here). :func:`fuse_projections` copies each group into one tensor and gives the layers
views of it, so no memory is added; afterwards the group's weights lie one after another in one
storage, which is how :func:`layer_weights` finds the joined tensor again (no record is kept beside
the model). A model converted after joining (``model.to(...)``) has separate tensors again, and
reads as unjoined.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

LayerWeights = tuple[torch.Tensor | None, ...]
"""One decoder layer's tensors, in the order the compiled layer takes them: two norms, then the projections'
weights, their scales and their biases (``None`` where absent); see :func:`layer_weights`."""
HeadWeights = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""The final norm's weight, then the LM head's weight, scales and bias (``None`` where absent); see :func:`head_weights`."""
Projection = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]
"""A projection's weight, scales (``None`` for float weights) and bias (``None`` where absent)."""


def fuse_projections(model: Any) -> None:
    """Join each layer's q, k and v weights, and its gate and up weights, into one tensor each (the layers
    keep views of them). int8 weights join with their scales; int4 weights (packed in blocks of output
    channels) stay apart, and so does a model with any layer that cannot join. Joining again is free."""
    groups = [group for layer in model.model.layers for group in _groups(layer)]
    if all(_joinable(linears) for linears in groups):
        for linears in groups:
            if _joined(linears) is None:
                _join(linears)


def layer_weights(model: Any) -> list[LayerWeights] | None:
    """Every layer's norms, then its projections' weights, int8 or int4 scales (``None`` for float
    weights) and biases; ``None`` if a projection has no weight the compiled step can read.

    The projections are q, k, v, o, gate, up, down; or, where :func:`fuse_projections` joined every
    layer's, qkv, o, gate_up, down."""
    layers = list(model.model.layers)
    joined = [[_joined(linears) for linears in _groups(layer)] for layer in layers]
    fused = all(group is not None for groups in joined for group in groups)
    result = []
    for layer, (qkv, gate_up) in zip(layers, joined):
        attn, mlp = layer.self_attn, layer.mlp
        linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        projections = [_projection(linear) for linear in linears]
        if any(p is None for p in projections):
            return None
        parts = [p for p in projections if p is not None]
        if fused:
            assert qkv is not None and gate_up is not None
            parts = [qkv, parts[3], gate_up, parts[6]]
        norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
        result.append((*norms, *(p[0] for p in parts), *(p[1] for p in parts), *(p[2] for p in parts)))
    return result


def head_weights(model: Any) -> HeadWeights | None:
    """The final norm's and the LM head's tensors as the compiled layer takes them; ``None`` where the
    head has no weight it can read (int4 heads included: the app never makes one)."""
    head = model.lm_head
    projection = _projection(head) if _kind(head) != "int4" else None
    if projection is None:
        return None
    return model.model.norm.weight, projection[0], projection[1], projection[2]


def _groups(layer: nn.Module) -> list[list[nn.Module]]:
    attn, mlp = layer.self_attn, layer.mlp
    return [[attn.q_proj, attn.k_proj, attn.v_proj], [mlp.gate_proj, mlp.up_proj]]


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


def _projection(linear: nn.Module) -> Projection | None:
    """(weight, scales or ``None``, bias or ``None``): a plain ``nn.Linear``'s float weight, the one-row copy
    of a packed layer (``core.runtime.weights.packed``), or an int8 or int4 layer's weight and scales
    (``core.runtime.weights.quantized``)."""
    kind = _kind(linear)
    bias = getattr(linear, "bias", None)
    if kind == "float":
        return linear.weight, None, bias
    if kind == "int8":
        return linear.qweight, linear.scales, bias
    if kind == "int4":
        return linear.packed, linear.scales_and_zeros, bias
    return (linear.one_row_weight, None, bias) if kind == "rows" else None


def _joined(linears: list[nn.Module]) -> Projection | None:
    """The group's joined projection, where :func:`_join` made it (its parts lie one after another)."""
    parts = [_projection(linear) for linear in linears]
    if any(p is None for p in parts):
        return None
    present = [p for p in parts if p is not None]
    weight = _spanning_view([p[0] for p in present])
    scales = None if present[0][1] is None else _spanning_view([p[1] for p in present if p[1] is not None])
    bias = None if present[0][2] is None else _spanning_view([p[2] for p in present if p[2] is not None])
    if weight is None or (present[0][1] is not None and scales is None) or (present[0][2] is not None and bias is None):
        return None
    return weight, scales, bias


def _spanning_view(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """One tensor over ``parts`` where they lie one after another in one storage (rows of one width), else ``None``."""
    first = parts[0]
    offset = first.storage_offset()
    for part in parts:
        if (
            part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
            or part.storage_offset() != offset
            or part.dtype != first.dtype
            or part.shape[1:] != first.shape[1:]
            or not part.is_contiguous()
        ):
            return None
        offset += part.numel()
    shape = (sum(part.shape[0] for part in parts), *first.shape[1:])
    stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))  # contiguous
    return first.detach().as_strided(shape, stride, first.storage_offset())


def _join(linears: list[nn.Module]) -> None:
    """One tensor for the group's weights (and scales, biases); each layer then holds a view of it."""
    parts = [_projection(linear) for linear in linears]
    present = [p for p in parts if p is not None]
    weight = torch.cat([p[0] for p in present])
    scales = None if present[0][1] is None else torch.cat([p[1] for p in present if p[1] is not None])
    bias = None if present[0][2] is None else torch.cat([p[2] for p in present if p[2] is not None])
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
        if bias is not None:
            _set_bias(linear, bias[rows])


def _set_bias(linear: nn.Module, bias: torch.Tensor) -> None:
    if isinstance(getattr(linear, "bias", None), nn.Parameter):
        linear.bias = nn.Parameter(bias, requires_grad=False)
    else:
        linear.bias = bias
