"""Auto's variants of a loaded model: the one rule for what calibration compares, the background compiles
ahead and the bench runs, so that the path the bench measures is the path a user gets."""

from __future__ import annotations

from typing import Any

import torch

from core.models.device import NAME_BY_DTYPE
from core.models.loader import LoadedModel
from core.runtime.weights.variants import bf16_copy, int8_copy


def auto_chooses_variant(loaded: LoadedModel) -> bool:
    """Whether Auto picks the dtype and weights of ``loaded``: on the CPU, where the user left dtype (and
    quantization) to it and the model came as fp32 or bf16 weights (not a GGUF file's blocks as stored)."""
    return (
        loaded.device.type == "cpu"
        and loaded.requested_dtype == "auto"
        and loaded.quantization == "none"
        and loaded.dtype in (torch.float32, torch.bfloat16)
    )


def variant_names(loaded: LoadedModel) -> tuple[str, ...]:
    """The variants Auto compares for ``loaded``, the model as loaded first (``fp32`` or ``bf16``), then a bf16
    copy of an fp32 one and, with quantization auto, int8 weights; only the first where Auto does not choose."""
    as_loaded = NAME_BY_DTYPE.get(loaded.dtype, str(loaded.dtype).removeprefix("torch."))
    if not auto_chooses_variant(loaded):
        return (as_loaded,)
    copies = (["bf16"] if loaded.dtype == torch.float32 else []) + (
        ["int8"] if loaded.requested_quantization == "auto" else []
    )
    return (as_loaded, *copies)


def variant_copy(model: Any, name: str) -> Any:
    """A copy of ``model`` (a transformers model) as the variant ``name`` other than the one as loaded."""
    makers = {"bf16": bf16_copy, "int8": int8_copy}
    if name not in makers:
        raise ValueError(f"no {name!r} variant: Auto makes {', '.join(makers)} copies")
    return makers[name](model)
