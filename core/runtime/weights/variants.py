"""The bf16 and int8 copies of a loaded CPU model that calibration compares, and the memory they take.

A copy shares the original's tensors until it converts them, so the bf16 and int8 copies of an
fp32 model cost their own weights only (a half and about a quarter of the fp32 ones), never a
second fp32 copy: ``copy.deepcopy`` first copied all of them (a 1B-parameter model peaked at
12.6 GB in calibration, 2.9 times its fp32 weights, and the copy alone took 8 s here).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch
from torch import nn

from core.runtime.weights.quantized import quantize_model


def copy_sharing_weights(model: nn.Module) -> Any:
    """A copy of ``model`` whose parameters and buffers are new tensor objects over the original's
    storage: converting the copy (``.to(dtype)``, quantizing, a new weight layout) replaces its
    tensors and leaves the original's as they were; only in-place changes of the values would show
    in both. Packed layers (``core.runtime.weights.packed``) copy their weights."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        alias = tensor.detach()
        memo[id(tensor)] = (
            nn.Parameter(alias, requires_grad=tensor.requires_grad) if isinstance(tensor, nn.Parameter) else alias
        )
    return copy.deepcopy(model, memo)


def dtype_copy(model: nn.Module, dtype: torch.dtype) -> Any:
    """The model with ``dtype`` weights; the original keeps its own."""
    return copy_sharing_weights(model).to(dtype)


def bf16_copy(model: nn.Module) -> Any:
    """The model with bf16 weights; the original keeps its own."""
    return dtype_copy(model, torch.bfloat16)


def int8_copy(model: nn.Module) -> Any:
    """The model with int8 weights and bf16 activations (what ``8bit`` means on the CPU); the original keeps its own."""
    copied = copy_sharing_weights(model)
    quantize_model(copied, 8)
    return copied.to(torch.bfloat16)


def variant_bytes(model: nn.Module, variant: str) -> int:
    """The memory the weights of :func:`bf16_copy` (``bf16``) or :func:`int8_copy` (``int8``) of ``model`` take."""
    if variant == "bf16":
        return 2 * sum(p.numel() for p in model.parameters())
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    quantized = {id(m.weight) for m in linears}
    kept = sum(p.numel() for p in model.parameters() if id(p) not in quantized)  # stays float: bf16
    embedding = model.get_input_embeddings().weight
    if id(embedding) in quantized:  # tied to the head: the head is quantized, the embedding stays
        kept += embedding.numel()
    return sum(m.weight.numel() + 2 * m.out_features for m in linears) + 2 * kept  # int8 weights, bf16 scales
