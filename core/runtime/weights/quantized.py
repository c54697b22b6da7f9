"""Weight-only int8 / int4 linear layers on the CPU, through PyTorch's own CPU kernels.

The CPU counterpart of bitsandbytes on CUDA. ``int8``: one scale per output channel (symmetric),
``torch._weight_int8pack_mm`` (widened for one ordinary product from :data:`WIDEN_FROM_ROWS` rows
on). ``int4``: asymmetric groups of ``group_size`` input channels, ``aten._weight_int4pack_mm_for_cpu``
(dequantised weight = (q - 8) * scale + zero). Activations stay
in the model's dtype (fp32 or bf16); ``model.to(dtype)`` converts the scales with it. The token
embedding is never quantized (it is a lookup, not a matmul).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

INT4_GROUP_SIZE = 32  # measured on the default model: perplexity 24.5 (as bf16) with 32, 33.2 with 64
WIDEN_FROM_ROWS = 32
"""From this many input rows on (a prompt), int8 weights are widened to the input's dtype for one ordinary
matrix product: torch's int8 kernel does no blocking across rows, so its cost grows with every row (the
default model here, bf16: 64 rows 147 against 106 ms, 256 rows 535-557 against 269-286; 8 rows 35 against 60)."""


QUANTIZE_BLOCK_ELEMENTS = 1 << 20
"""Weights quantized at a time: the temporaries of a whole layer of a 1B model (46 MB in fp32) are each
new memory from the system, and its page faults made quantizing that model take 12.4 s here (13.8 s of
them in the kernel); blocks of this size reuse the same memory."""


def quantize_rows(
    shape: torch.Size | tuple[int, int], rows_of: Callable[[int, int], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 weights ``[out, in]`` and fp32 scales (one per output channel, symmetric) of the weight whose rows
    ``[start, stop)`` ``rows_of`` gives: a few at a time, so no whole fp32 copy is ever made (see
    :data:`QUANTIZE_BLOCK_ELEMENTS`)."""
    qweight = torch.empty(tuple(shape), dtype=torch.int8)
    scales = torch.empty(shape[0], dtype=torch.float32)
    rows = max(1, QUANTIZE_BLOCK_ELEMENTS // shape[1])
    for start in range(0, shape[0], rows):
        block = rows_of(start, start + rows).float()
        block_scales = (block.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        qweight[start : start + rows] = torch.round(block / block_scales[:, None]).clamp(-128, 127)
        scales[start : start + rows] = block_scales
    return qweight, scales


class Int8WeightLinear(nn.Module):
    """``y = x @ (q * scale).T + bias`` with int8 ``q`` [out, in] and one scale per output channel."""

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = qweight.shape[1], qweight.shape[0]
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8WeightLinear:
        weight = linear.weight.detach()
        qweight, scales = quantize_rows(weight.shape, lambda start, stop: weight[start:stop])
        dtype = linear.weight.dtype
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        return cls(qweight, scales.to(dtype), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.shape[0] >= WIDEN_FROM_ROWS:
            out = F.linear(flat, self.qweight.to(x.dtype)) * self.scales.to(x.dtype)
        else:
            out = torch._weight_int8pack_mm(flat, self.qweight, self.scales.to(x.dtype))
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


class Int4WeightLinear(nn.Module):
    """Group-wise asymmetric int4 weights packed for the CPU kernel, scales and zeros per group."""

    def __init__(
        self,
        packed: torch.Tensor,
        scales_and_zeros: torch.Tensor,
        group_size: int,
        in_features: int,
        out_features: int,
        bias: torch.Tensor | None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer("packed", packed)
        self.register_buffer("scales_and_zeros", scales_and_zeros)  # [in / group, out, 2]
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int) -> Int4WeightLinear:
        out_features, in_features = linear.weight.shape
        groups = linear.weight.detach().float().reshape(out_features, in_features // group_size, group_size)
        low, high = groups.amin(dim=-1), groups.amax(dim=-1)
        scales = ((high - low) / 15).clamp(min=1e-6)
        zeros = low + 8 * scales
        q = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15).to(torch.int32)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.reshape(out_features, in_features), 1)
        scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous().to(linear.weight.dtype)
        bias = linear.bias.detach().clone() if linear.bias is not None else None
        return cls(packed, scales_and_zeros, group_size, in_features, out_features, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, self.packed, self.group_size, self.scales_and_zeros.to(x.dtype)
        )
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def quantize_model(model: Any, bits: int, *, include_lm_head: bool | None = None) -> int:
    """Replace the model's ``nn.Linear`` layers in place with int8 (``bits=8``) or int4 (``bits=4``) ones.

    ``include_lm_head`` defaults to True for int8 and False for int4: on the default model an int4
    head raised perplexity from 24.5 to 26.2, an int8 one changed nothing measurable. A layer int4
    cannot pack (input width not a multiple of 32) stays in float. Returns the number replaced.
    """
    if bits not in (4, 8):
        raise ValueError(f"CPU weight-only quantization takes 8 or 4 bits (got {bits}).")
    if getattr(model, "device", torch.device("cpu")).type != "cpu":
        raise ValueError("CPU weight-only quantization needs the model on the CPU; on CUDA use bitsandbytes.")
    if include_lm_head is None:
        include_lm_head = bits == 8
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and (include_lm_head or module is not head)
    ]
    replaced = 0
    for name, linear in targets:
        if bits == 8:
            new: nn.Module = Int8WeightLinear.from_linear(linear)
        else:
            if linear.in_features % INT4_GROUP_SIZE:
                log.info(
                    "int4: %s stays in float (input width %d is not a multiple of %d)",
                    name,
                    linear.in_features,
                    INT4_GROUP_SIZE,
                )
                continue
            new = Int4WeightLinear.from_linear(linear, INT4_GROUP_SIZE)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
        replaced += 1
    if head is not None and include_lm_head and hasattr(model.config, "tie_word_embeddings"):
        model.config.tie_word_embeddings = False  # the head is now its own (quantized) copy
    return replaced
