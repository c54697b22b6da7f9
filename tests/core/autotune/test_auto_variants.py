"""Auto's one rule for the variants it compares: calibration, the background compiles and the bench share it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.autotune.prepare import variant_copies
from core.autotune.variants import auto_chooses_variant, variant_copy, variant_names
from core.engine.background import variant_makers


def _kind(model) -> str:
    """What a variant is: int8 where its linear layers lost their float weights, else its weights' dtype."""
    if not any(isinstance(m, torch.nn.Linear) for m in model.modules()):
        return "int8"
    return str(next(model.parameters()).dtype)


@pytest.mark.parametrize(
    ("dtype", "requested_dtype", "requested_quantization", "names"),
    [
        (torch.float32, "auto", "auto", ("fp32", "bf16", "int8")),
        (torch.float32, "auto", "none", ("fp32", "bf16")),
        (torch.bfloat16, "auto", "auto", ("bf16", "int8")),
        (torch.float32, "fp32", "auto", ("fp32",)),  # the user chose the dtype
        (torch.float16, "auto", "auto", ("fp16",)),  # Auto compares fp32 and bf16 models only
    ],
)
def test_the_variants_follow_what_the_user_left_to_auto(
    tiny_loaded, dtype, requested_dtype, requested_quantization, names
) -> None:
    loaded = dataclasses.replace(
        tiny_loaded, dtype=dtype, requested_dtype=requested_dtype, requested_quantization=requested_quantization
    )
    assert variant_names(loaded) == names
    assert auto_chooses_variant(loaded) == (requested_dtype == "auto" and dtype != torch.float16)


def test_calibration_and_the_background_make_the_same_variants(tiny_loaded) -> None:
    loaded = dataclasses.replace(tiny_loaded, requested_dtype="auto")
    names = variant_names(loaded)
    assert names == ("fp32", "bf16", "int8")
    copies = variant_copies(loaded).models
    assert tuple(copies) == names and copies["fp32"] is loaded.model
    kinds = ["torch.float32", "torch.bfloat16", "int8"]
    assert [_kind(model) for model in copies.values()] == kinds
    assert [_kind(make()) for make in variant_makers(loaded)] == kinds  # one-layer copies, compiled ahead


def test_a_variant_other_than_bf16_or_int8_is_refused(tiny_loaded) -> None:
    with pytest.raises(ValueError, match="no 'fp16' variant"):
        variant_copy(tiny_loaded.model, "fp16")
