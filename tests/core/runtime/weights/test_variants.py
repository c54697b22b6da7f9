"""The bf16 and int8 copies calibration compares: the original keeps its weights, and no fp32 copy is made."""

from __future__ import annotations

import copy

import torch

from core.runtime.weights.quantized import Int8WeightLinear, quantize_model
from core.runtime.weights.variants import bf16_copy, copy_sharing_weights, int8_copy, variant_bytes
from tests.conftest import make_model, tiny_llama_config


def _snapshot(model) -> dict[str, tuple[int, torch.dtype, torch.Tensor]]:
    return {name: (t.data_ptr(), t.dtype, t.clone()) for name, t in model.state_dict().items()}


def _unchanged(model, before) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(
        t.data_ptr() == ptr and t.dtype == dtype and torch.equal(t, value)
        for (ptr, dtype, value), t in zip(before.values(), after.values())
    )


def test_a_copy_shares_the_weights_until_it_converts_them() -> None:
    model = make_model(tiny_llama_config(), seed=0)
    before = _snapshot(model)
    shared = copy_sharing_weights(model)
    pairs = list(zip(model.parameters(), shared.parameters()))
    assert all(a is not b and a.data_ptr() == b.data_ptr() for a, b in pairs)  # new objects, no data copied
    assert shared.lm_head.weight is shared.model.embed_tokens.weight  # tied weights stay tied
    shared.to(torch.bfloat16)
    assert _unchanged(model, before)
    assert all(p.dtype == torch.bfloat16 for p in shared.parameters())


def test_the_copies_leave_the_original_as_it_was_and_compute_as_copies_made_by_deepcopy() -> None:
    model = make_model(tiny_llama_config(), seed=0)
    before = _snapshot(model)
    bf16, int8 = bf16_copy(model), int8_copy(model)
    assert _unchanged(model, before)
    reference_int8 = copy.deepcopy(model)
    quantize_model(reference_int8, 8)
    reference_int8.to(torch.bfloat16)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(bf16(ids).logits, copy.deepcopy(model).to(torch.bfloat16)(ids).logits)
        assert torch.equal(int8(ids).logits, reference_int8(ids).logits)
    assert isinstance(int8.lm_head, Int8WeightLinear) and int8.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.config.tie_word_embeddings and not int8.config.tie_word_embeddings  # the copy's own config


def test_variant_bytes_are_the_bytes_of_the_copies_weights() -> None:
    for tied in (True, False):
        model = make_model(tiny_llama_config(tie_word_embeddings=tied), seed=0)
        bf16, int8 = bf16_copy(model), int8_copy(model)
        assert variant_bytes(model, "bf16") == sum(p.numel() * p.element_size() for p in bf16.parameters())
        int8_layers = [m for m in int8.modules() if isinstance(m, Int8WeightLinear)]
        weights = sum(p.numel() * p.element_size() for p in int8.parameters()) + sum(
            m.qweight.numel() + m.scales.numel() * m.scales.element_size() for m in int8_layers
        )
        assert variant_bytes(model, "int8") == weights
