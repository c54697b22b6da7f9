"""Float weights laid out for the CPU's matrix products: prepacked for oneDNN, optionally also plain for one-row steps.

``nn.Linear`` hands oneDNN (or MKL) a plain row-major weight on every call, and the kernels for a
few rows of input (a decoding step) read it far below the memory's speed; oneDNN's own layout,
made once, is what its fast kernels want. On the development machine (AVX-512, 2 threads) a
1-token fp32 step of the default model went from 53 to 35 ms and a 12-token step from 94 to 43 ms.

For a single bf16/fp16 row, torch's own vectorised kernel (reached with oneDNN switched off) beats
even the packed weights (22 against 27 ms per 1-token bf16 step there), but it is slow for several
rows; the ``packed+rows`` layout keeps both copies and uses each where it is fast, at twice the
weights' memory, so it is offered only for models whose float weights fit in
:data:`ROWS_COPY_LIMIT_BYTES`.

Which layout pays depends on the processor, so ``core.autotune.layout`` measures them where the app
runs. A packed model still converts with ``.to(dtype)``, copies with ``copy.deepcopy`` and gives
its plain weights in ``state_dict()``; it cannot move off the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from core.runtime.memory import system_memory

log = logging.getLogger(__name__)

PLAIN, PACKED, PACKED_ROWS = "plain", "packed", "packed+rows"
LAYOUTS = (PLAIN, PACKED, PACKED_ROWS)
ROWS_COPY_LIMIT_BYTES = 2 * 1024**3  # the extra plain copy of ``packed+rows`` is offered up to this many weight bytes
ROWS_COPY_MEMORY_MARGIN = 1.25  # ... and where the free memory holds this many times its bytes


@contextmanager
def one_row_kernels() -> Iterator[None]:
    """oneDNN switched off: products of one row of half-precision input then run on torch's own, faster kernels."""
    enabled, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


def packing_available() -> bool:
    """oneDNN is built into this torch (it is in the official CPU builds)."""
    return bool(torch.backends.mkldnn.is_available())


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` in oneDNN's layout (and, with ``rows``, also plain: for half-precision
    one-row inputs, and for the compiled 1-token step's own products);
    same inputs and outputs as the ``nn.Linear`` it replaces."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, rows: bool = False) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("packed weights are for the CPU only")
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        self.plain = weight.detach() if rows else None
        self.bias = None if bias is None else bias.detach()

    @classmethod
    def from_linear(cls, linear: nn.Linear, *, rows: bool = False) -> PackedLinear:
        return cls(linear.weight, linear.bias, rows=rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            self.plain is not None and x.numel() == self.in_features and x.dtype != torch.float32
        ):  # one half-precision row
            with one_row_kernels():
                return F.linear(x, self.plain, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    @property
    def one_row_weight(self) -> torch.Tensor | None:
        """The plain weight that one-row steps read (``packed+rows``), else ``None``."""
        return self.plain

    def plain_weight(self) -> torch.Tensor:
        """The plain weight (a new tensor unless the ``rows`` copy is kept)."""
        return self.plain if self.plain is not None else self.packed.to_dense()

    def to_linear(self) -> nn.Linear:
        """The plain ``nn.Linear`` with the same weights."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.packed.dtype)
        linear.weight = nn.Parameter(self.plain_weight(), requires_grad=False)
        if self.bias is not None:
            linear.bias = nn.Parameter(self.bias, requires_grad=False)
        return linear

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> PackedLinear:
        # ``.to(dtype)``, ``.float()`` and the like: convert the plain weights, then pack them again.
        weight = fn(self.plain_weight())
        if weight.device.type != "cpu":
            raise ValueError("a model with packed CPU weights cannot move off the CPU; load it again for the GPU")
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        self.plain = weight if self.plain is not None else None
        self.bias = None if self.bias is None else fn(self.bias)
        return self

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        # ``state_dict()`` holds the plain weights, under the names ``nn.Linear`` gives them (export, saving).
        destination[prefix + "weight"] = self.plain_weight()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        bias = None if self.bias is None else self.bias.clone()
        return PackedLinear(self.plain_weight().clone(), bias, rows=self.plain is not None)

    def extra_repr(self) -> str:
        layout = PACKED_ROWS if self.plain is not None else PACKED
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, {layout}"
        )


def apply_layout(model: nn.Module, layout: str) -> int:
    """Put every plain float ``nn.Linear`` (the LM head included) in ``layout``, in place; returns how many layers.

    Quantized linears (subclasses, int8/int4 modules) are left alone. A head tied to the embedding
    gets its own packed copy; the embedding keeps the shared weight. Layers change one at a time,
    so each old weight can be freed as it goes; packed layers only gain or drop their plain copy
    between ``packed`` and ``packed+rows`` (no repacking). Raises RuntimeError where oneDNN cannot
    pack the dtype here (at the first layer, before any change).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown weight layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    current = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, PackedLinear) or (type(child) is nn.Linear and child.weight.is_floating_point())
    ]
    for parent, name in current:
        layer = getattr(parent, name)
        if isinstance(layer, PackedLinear) and layout != PLAIN:
            layer.plain = None if layout == PACKED else layer.plain_weight()
            continue
        linear = layer.to_linear() if isinstance(layer, PackedLinear) else layer
        setattr(
            parent, name, linear if layout == PLAIN else PackedLinear.from_linear(linear, rows=layout == PACKED_ROWS)
        )
    return len(current)


def layout_of(model: nn.Module) -> str:
    """The layout :func:`apply_layout` put the model's float linears in."""
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    if not packed:
        return PLAIN
    return PACKED_ROWS if packed[0].plain is not None else PACKED


def rows_copy_allowed(model: nn.Module) -> bool:
    """The plain one-row copy pays in eager steps only for half precision, and doubles the weights' memory."""
    dtype = float_dtype(model)
    return dtype in (torch.bfloat16, torch.float16) and rows_copy_fits(model)


def rows_copy_fits(model: nn.Module) -> bool:
    """The float weights are small enough (:data:`ROWS_COPY_LIMIT_BYTES`) to keep a second, plain copy,
    and the free memory has room for it.

    In fp32 that copy serves only the compiled 1-token step (``core.runtime.compiled``), whose
    own products read plain rows; eager one-row products stay on the packed weights there."""
    linears = [m for m in model.modules() if type(m) is nn.Linear or isinstance(m, PackedLinear)]
    dtype = float_dtype(model)
    if dtype is None:
        return False
    copy_bytes = sum(m.in_features * m.out_features for m in linears) * torch.finfo(dtype).bits // 8
    memory = system_memory()
    return copy_bytes <= ROWS_COPY_LIMIT_BYTES and (
        memory is None or ROWS_COPY_MEMORY_MARGIN * copy_bytes <= memory.available
    )


def float_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype of the first float linear (plain or packed), ``None`` if there is none."""
    first = next((m for m in model.modules() if type(m) is nn.Linear or isinstance(m, PackedLinear)), None)
    if first is None:
        return None
    return first.weight.dtype if isinstance(first, nn.Linear) else first.packed.dtype
