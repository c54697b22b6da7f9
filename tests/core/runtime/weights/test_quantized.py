"""CPU weight-only int8/int4: the kernels compute the dequantized matmul, and decoding stays exact."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.lookahead import Decoding, LookaheadConfig
from core.runtime.weights.quantized import WIDEN_FROM_ROWS, Int4WeightLinear, Int8WeightLinear, quantize_model
from tests.conftest import make_model, tiny_llama_config


def _linear(out_features: int, in_features: int, bias: bool = False) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
def test_int8_layer_is_the_dequantized_matmul(bias: bool) -> None:
    linear = _linear(96, 64, bias)
    layer = Int8WeightLinear.from_linear(linear)
    weight = linear.weight.detach()
    scales = weight.abs().amax(dim=1) / 127
    assert torch.equal(layer.qweight, torch.round(weight / scales[:, None]).to(torch.int8))
    dequantized = layer.qweight.float() * layer.scales[:, None]
    assert (dequantized - weight).abs().max() <= scales.max() / 2 + 1e-7  # half a step at most
    for rows in (3, WIDEN_FROM_ROWS):  # torch's int8 kernel, then widened weights for a prompt's many rows
        x = torch.randn(2, rows, 64)
        expected = x @ dequantized.T + (linear.bias.detach() if bias else 0)
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_int8_quantizes_in_blocks_of_rows_as_it_would_whole(monkeypatch) -> None:
    from core.runtime.weights import quantized as cpu_quant

    linear = _linear(96, 64)
    whole = Int8WeightLinear.from_linear(linear)
    monkeypatch.setattr(cpu_quant, "QUANTIZE_BLOCK_ELEMENTS", 7 * 64)  # 7 rows a block: 13 blocks, then 5 rows
    blocked = Int8WeightLinear.from_linear(linear)
    assert torch.equal(blocked.qweight, whole.qweight) and torch.equal(blocked.scales, whole.scales)


def test_int4_layer_is_the_dequantized_matmul() -> None:
    linear = _linear(96, 128)
    layer = Int4WeightLinear.from_linear(linear, 32)
    groups = linear.weight.detach().reshape(96, 4, 32)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = (high - low) / 15
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15)
    dequantized = ((q - 8) * scale[..., None] + (low + 8 * scale)[..., None]).reshape(96, 128)
    assert (dequantized - linear.weight).abs().max() <= scale.max() / 2 + 1e-6
    x = torch.randn(5, 128)
    torch.testing.assert_close(layer(x), x @ dequantized.T, rtol=1e-4, atol=1e-4)


def test_bf16_activations_follow_the_model_dtype() -> None:
    linear = _linear(64, 64)
    layer = Int8WeightLinear.from_linear(linear).to(torch.bfloat16)
    four = Int4WeightLinear.from_linear(linear, 64).to(torch.bfloat16)
    assert layer.qweight.dtype == torch.int8 and layer.scales.dtype == torch.bfloat16
    for rows, modules in ((3, (layer, four)), (WIDEN_FROM_ROWS, (layer,))):  # int8 widens its weights for many rows
        x = torch.randn(rows, 64)
        for module in modules:
            out = module(x.to(torch.bfloat16))
            assert out.dtype == torch.bfloat16
            torch.testing.assert_close(out.float(), linear(x).detach(), rtol=0.1, atol=0.1)


def test_int4_leaves_a_layer_it_cannot_group_in_float() -> None:
    model = make_model(
        tiny_llama_config(256, hidden_size=48, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2)
    )
    assert quantize_model(model, 4) == 2 * 1  # only down_proj (input 96) groups by 32
    assert isinstance(model.model.layers[0].mlp.down_proj, Int4WeightLinear)
    assert isinstance(model.model.layers[0].self_attn.q_proj, nn.Linear)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_model_replaces_linears_but_not_the_embedding(bits: int) -> None:
    model = make_model(tiny_llama_config(256))
    replaced = quantize_model(model, bits, include_lm_head=True)
    kind = Int8WeightLinear if bits == 8 else Int4WeightLinear
    assert replaced == 2 * 7 + 1  # q k v o gate up down per layer, and the head
    assert isinstance(model.lm_head, kind)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert isinstance(model.get_input_embeddings(), nn.Embedding)


def test_lm_head_stays_in_float_for_int4_by_default() -> None:
    model = make_model(tiny_llama_config(256))
    assert quantize_model(model, 4) == 14
    assert isinstance(model.lm_head, nn.Linear)
    model = make_model(tiny_llama_config(256))
    assert quantize_model(model, 8, include_lm_head=False) == 14


def test_unsupported_bits_are_refused() -> None:
    with pytest.raises(ValueError, match="8 or 4 bits"):
        quantize_model(make_model(tiny_llama_config(256)), 2)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("config", [LookaheadConfig(5, 4, 5), LookaheadConfig(0, 4, 3)])
def test_greedy_lookahead_equals_plain_on_a_quantized_model(bits: int, config: LookaheadConfig) -> None:
    model = make_model(tiny_llama_config(96), seed=3)
    quantize_model(model, bits)
    g = torch.Generator().manual_seed(1)
    head = torch.randint(3, 96, (20,), generator=g).tolist()
    prompt = head + head
    plain = Decoding(model, prompt, max_new_tokens=40)
    lookahead = Decoding(model, prompt, lookahead=config, max_new_tokens=40)
    list(plain), list(lookahead)
    assert lookahead.tokens == plain.tokens and len(plain.tokens) == 40
