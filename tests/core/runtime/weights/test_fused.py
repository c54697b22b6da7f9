"""Joined q/k/v and gate/up weights: views of one tensor, found again from the layers alone."""

from __future__ import annotations

import torch

from core.runtime.weights.fused import fuse_projections, layer_weights
from core.runtime.weights.quantized import quantize_model
from tests.conftest import make_model, tiny_llama_config


def _projections(model) -> int:
    weights = layer_weights(model)
    assert weights is not None
    return (len(weights[0]) - 2) // 3  # norms, then weights, scales and biases per projection


def test_joined_weights_are_views_the_layers_share_and_joining_again_copies_nothing() -> None:
    model = make_model(tiny_llama_config(96, attention_bias=True), seed=1)
    attn = model.model.layers[0].self_attn
    expected = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach().clone()
    assert _projections(model) == 7  # as loaded: every projection apart
    fuse_projections(model)
    assert _projections(model) == 4  # qkv, o, gate_up, down
    qkv_weight, qkv_bias = layer_weights(model)[0][2], layer_weights(model)[0][10]
    assert torch.equal(qkv_weight, expected) and qkv_weight.data_ptr() == attn.q_proj.weight.data_ptr()
    assert qkv_bias is not None and qkv_bias.data_ptr() == attn.q_proj.bias.data_ptr()
    pointer = attn.k_proj.weight.data_ptr()
    fuse_projections(model)
    assert attn.k_proj.weight.data_ptr() == pointer  # already joined: left as it is


def test_a_model_converted_after_joining_reads_as_unjoined() -> None:
    model = make_model(tiny_llama_config(96), seed=2)
    fuse_projections(model)
    model.to(torch.bfloat16)  # new tensors, one per layer: no longer one after another
    assert _projections(model) == 7 and layer_weights(model)[0][2].dtype == torch.bfloat16


def test_int8_weights_join_with_their_scales_and_int4_ones_stay_apart() -> None:
    int8 = make_model(tiny_llama_config(96), seed=3)
    quantize_model(int8, 8)
    fuse_projections(int8)
    assert _projections(int8) == 4 and layer_weights(int8)[0][2].dtype == torch.int8
    int4 = make_model(tiny_llama_config(96), seed=3)
    quantize_model(int4, 4)
    fuse_projections(int4)
    assert _projections(int4) == 7
