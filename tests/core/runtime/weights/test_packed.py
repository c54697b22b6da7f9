"""CPU weight layouts (packed for oneDNN, plus a plain copy for one-row steps): same products,
conversions that still work, decoding that stays exact."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from core.lookahead import Decoding, LookaheadConfig
from core.runtime.weights.packed import (
    PACKED,
    PACKED_ROWS,
    PLAIN,
    PackedLinear,
    apply_layout,
    layout_of,
    packing_available,
    rows_copy_allowed,
    rows_copy_fits,
)
from tests.conftest import make_model, tiny_llama_config

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch has no oneDNN")


def _packs_bf16() -> bool:
    """oneDNN packs bf16 weights only with AVX-512 or AVX-NE-CONVERT (``choose_layout`` keeps plain elsewhere)."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16), None)
    except RuntimeError:
        return False
    return True


needs_bf16_packing = pytest.mark.skipif(packing_available() and not _packs_bf16(), reason="no bf16 packing here")
BF16 = pytest.param(torch.bfloat16, marks=needs_bf16_packing)


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_packed_layer_computes_the_linear(rows: bool, bias: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96, bias=bias).to(dtype)
    packed = PackedLinear.from_linear(linear, rows=rows)
    for shape in [(1, 64), (1, 1, 64), (7, 64), (1, 5, 64)]:  # one row (the plain copy, with rows) and several
        x = torch.randn(shape, dtype=dtype)
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(packed(x), linear(x).detach(), rtol=tolerance, atol=tolerance)
    assert torch.backends.mkldnn.enabled  # switched off only around a one-row product
    back = packed.to_linear()
    assert torch.equal(back.weight, linear.weight) and (not bias or torch.equal(back.bias, linear.bias))


@pytest.mark.parametrize("layout", [PACKED, PACKED_ROWS])
def test_layouts_keep_every_weight_and_leave_the_embedding_alone(layout: str) -> None:
    model = make_model(tiny_llama_config(256))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert apply_layout(model, layout) == 2 * 7 + 1  # q k v o gate up down per layer, and the head
    assert layout_of(model) == layout and isinstance(model.lm_head, PackedLinear)
    packed_state = model.state_dict()  # the plain weights, under the same names (export saves them)
    assert packed_state.keys() == before.keys() and all(torch.equal(before[k], packed_state[k]) for k in before)
    assert isinstance(model.get_input_embeddings(), nn.Embedding)
    assert not any(type(m) is nn.Linear for m in model.modules())
    other = PACKED if layout == PACKED_ROWS else PACKED_ROWS
    assert apply_layout(model, other) == 15 and layout_of(model) == other  # from one layout to another
    assert apply_layout(model, PLAIN) == 15 and layout_of(model) == PLAIN
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k != "lm_head.weight")
    assert torch.equal(model.lm_head.weight, before.get("lm_head.weight", before["model.embed_tokens.weight"]))
    with pytest.raises(ValueError, match="unknown weight layout"):
        apply_layout(model, "blocked")


@needs_bf16_packing
@pytest.mark.parametrize("layout", [PACKED, PACKED_ROWS])
def test_a_packed_model_converts_and_copies(layout: str) -> None:
    model = make_model(tiny_llama_config(256))
    reference = copy.deepcopy(model).to(torch.bfloat16)
    apply_layout(model, layout)
    copied = copy.deepcopy(model)
    converted = model.to(torch.bfloat16)
    assert converted.lm_head.packed.dtype == torch.bfloat16 and copied.lm_head.packed.dtype == torch.float32
    assert layout_of(converted) == layout_of(copied) == layout
    apply_layout(converted, PLAIN)
    assert torch.equal(converted.model.layers[0].mlp.up_proj.weight, reference.model.layers[0].mlp.up_proj.weight)
    with pytest.raises(ValueError, match="CPU"):
        PackedLinear(torch.zeros(2, 2, device="meta"), None)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_between_packed_layouts_only_the_plain_copy_comes_and_goes(dtype: torch.dtype) -> None:
    model = make_model(tiny_llama_config(256)).to(dtype)
    original = model.model.layers[0].mlp.up_proj.weight.detach().clone()
    apply_layout(model, PACKED)
    layer = model.model.layers[0].mlp.up_proj
    packed = layer.packed
    apply_layout(model, PACKED_ROWS)
    assert model.model.layers[0].mlp.up_proj is layer and layer.packed is packed  # not repacked
    assert layout_of(model) == PACKED_ROWS and torch.equal(layer.plain, original)
    apply_layout(model, PACKED)
    assert layer.packed is packed and layer.plain is None and layout_of(model) == PACKED
    apply_layout(model, PLAIN)
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, original)


def test_an_fp32_row_reads_the_packed_weights_even_beside_a_plain_copy() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(64, 96)
    x = torch.randn(1, 64)  # fp32: eager one-row steps compute as the wider (packed) ones, bit for bit
    assert torch.equal(PackedLinear.from_linear(linear, rows=True)(x), PackedLinear.from_linear(linear)(x))


def test_the_plain_row_copy_is_offered_for_small_half_precision_models_only() -> None:
    model = make_model(tiny_llama_config(256))
    assert not rows_copy_allowed(model)  # fp32: oneDNN's packed kernel is the fast one for a single row too
    assert rows_copy_fits(model)  # but the compiled 1-token step may read a plain copy
    assert rows_copy_allowed(model.to(torch.bfloat16))


def test_no_plain_row_copy_without_the_free_memory_for_it(monkeypatch) -> None:
    from core.runtime.memory import SystemMemory
    from core.runtime.weights import packed as cpu_packed

    model = make_model(tiny_llama_config(256)).to(torch.bfloat16)
    weights = sum(m.weight.numel() * 2 for m in model.modules() if isinstance(m, nn.Linear))
    room = int(cpu_packed.ROWS_COPY_MEMORY_MARGIN * weights)
    monkeypatch.setattr(cpu_packed, "system_memory", lambda: SystemMemory(total=10**12, available=room))
    assert rows_copy_allowed(model)
    monkeypatch.setattr(cpu_packed, "system_memory", lambda: SystemMemory(total=10**12, available=room - 1))
    assert not rows_copy_allowed(model) and not rows_copy_fits(model)


def _decode(model: nn.Module, prompt: list[int], config: LookaheadConfig | None = None, tokens: int = 48) -> Decoding:
    decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=tokens)
    list(decoding)
    return decoding


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_lookahead_on_packed_weights_equals_plain_and_generate(seed: int) -> None:
    model = make_model(tiny_llama_config(96), seed=seed)
    head = torch.randint(3, 96, (20,), generator=torch.Generator().manual_seed(seed)).tolist()
    prompt = head + head  # repeats: the prompt's n-grams give drafts that get accepted
    apply_layout(model, PACKED)
    plain = _decode(model, prompt)
    assert len(plain.tokens) == 48
    for config in (LookaheadConfig(5, 4, 5), LookaheadConfig(0, 4, 2), LookaheadConfig(3, 3, 3)):
        steps = len(list(lookahead := Decoding(model, prompt, lookahead=config, max_new_tokens=48)))
        assert lookahead.tokens == plain.tokens, config.label
        assert steps < 24  # multi-token steps were accepted: the packed products ran at several widths
    with torch.inference_mode():
        generated = model.generate(
            torch.tensor([prompt]), max_new_tokens=48, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
    assert generated == plain.tokens
