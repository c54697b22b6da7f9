"""Float weights prepacked in oneDNN's blocked layout, for the CPU's matrix products.

``nn.Linear`` hands oneDNN (or MKL) a plain row-major weight on every call, and the kernels for a
few rows of input (a decoding step) read it far below the memory's speed; oneDNN's own layout,
made once, is what its fast kernels want. On the development machine (AVX-512) a 1-token fp32 step
of the default model went from 58 to 36 ms and a 12-token step from 106 to 47 ms. Whether it pays
depends on the processor, so :func:`pack_if_faster` measures both layouts where the app runs.

A packed model still converts with ``.to(dtype)``, copies with ``copy.deepcopy`` (each layer is
unpacked, converted and packed again) and gives its plain weights in ``state_dict()``; it cannot
move off the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

PACK_MARGIN = 1.03  # packed steps must be this much cheaper to be kept (else the plain layout stays)


def packing_available() -> bool:
    """oneDNN is built into this torch (it is in the official CPU builds)."""
    return bool(torch.backends.mkldnn.is_available())


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` in oneDNN's layout; same inputs and outputs as the ``nn.Linear`` it replaces."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("packed weights are for the CPU only")
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        self.bias = None if bias is None else bias.detach()

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "PackedLinear":
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def to_linear(self) -> nn.Linear:
        """The plain ``nn.Linear`` with the same weights."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.packed.dtype)
        linear.weight = nn.Parameter(self.packed.to_dense(), requires_grad=False)
        if self.bias is not None:
            linear.bias = nn.Parameter(self.bias, requires_grad=False)
        return linear

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> "PackedLinear":
        # ``.to(dtype)``, ``.float()`` and the like: convert the plain weights, then pack them again.
        weight = fn(self.packed.to_dense())
        bias = None if self.bias is None else fn(self.bias)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None) if weight.device.type == "cpu" else _refuse()
        self.bias = bias
        return self

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        # ``state_dict()`` holds the plain weights, under the names ``nn.Linear`` gives them (export, saving).
        destination[prefix + "weight"] = self.packed.to_dense()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias

    def __deepcopy__(self, memo: dict) -> "PackedLinear":
        return PackedLinear(self.packed.to_dense().clone(), None if self.bias is None else self.bias.clone())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, packed"


def _refuse() -> torch.Tensor:
    raise ValueError("a model with packed CPU weights cannot move off the CPU; load it again for the GPU")


def pack_model(model: nn.Module) -> int:
    """Replace every plain float ``nn.Linear`` (the LM head included) by a :class:`PackedLinear`, in place.

    Quantized linears (subclasses, int8/int4 modules) are left alone. A head tied to the embedding
    gets its own packed copy; the embedding keeps the shared weight. Returns how many were packed.
    Raises RuntimeError where oneDNN cannot pack the dtype here (at the first layer, before any change).
    """
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear and child.weight.is_floating_point()]
    for parent, name in targets:  # one at a time: each plain weight can be freed once its packed copy is in
        setattr(parent, name, PackedLinear.from_linear(getattr(parent, name)))
    return len(targets)


def unpack_model(model: nn.Module) -> int:
    """Undo :func:`pack_model`: every :class:`PackedLinear` back to an ``nn.Linear``. Returns how many."""
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if isinstance(child, PackedLinear)]
    for parent, name in targets:
        setattr(parent, name, getattr(parent, name).to_linear())
    return len(targets)


def is_packed(model: nn.Module) -> bool:
    return any(isinstance(m, PackedLinear) for m in model.modules())


def pack_if_faster(model: Any, cancelled: Callable[[], bool] | None = None) -> bool:
    """Measure a 1-token and an 8-token step in both layouts; leave ``model`` in the faster one.

    Returns True when it is left packed. A CPU float model only; anything else stays as it is, and
    so does a model whose dtype this processor's oneDNN cannot pack (bf16 without AVX-512 or
    AVX-NE-CONVERT, for one).
    """
    from core.lookahead.auto import measure_step_seconds

    if model.device.type != "cpu" or not packing_available() or is_packed(model):
        return is_packed(model)
    sizes = (1, 8)
    plain = measure_step_seconds(model, sizes, context=128, repeats=3, cancelled=cancelled)
    try:
        if not pack_model(model):
            return False
        packed = measure_step_seconds(model, sizes, context=128, repeats=3, cancelled=cancelled)
    except RuntimeError as err:  # oneDNN refuses this dtype on this processor
        log.info("weights stay in the plain layout: %s", err)
        unpack_model(model)
        return False
    if sum(packed) * PACK_MARGIN <= sum(plain):
        return True
    unpack_model(model)
    return False
