"""The rotary tables the int8 decoder reads: the model's own values, row for row."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from core.runtime.rotary import RotaryTable


def rotary(**rope: object) -> LlamaRotaryEmbedding:
    config = LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=64)
    if rope:
        config.rope_parameters = {"rope_theta": 10000.0, **rope}
    return LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "rope",
    [
        {},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ],
)
def test_each_row_is_what_the_module_gives_that_position_alone(dtype: torch.dtype, rope: dict) -> None:
    module = rotary(**rope)
    table = RotaryTable(module, dtype, torch.device("cpu"))
    like = torch.empty(0, dtype=dtype)
    for positions, end in ((torch.arange(5), 5), (torch.tensor([7, 9, 8]), 10), (torch.tensor([300]), 301)):
        rows, cos, sin = table.lookup(positions, end)
        assert torch.equal(rows, positions) and cos.dtype == sin.dtype == torch.float32
        for row, position in zip(rows.tolist(), positions.tolist()):
            alone_cos, alone_sin = module(like, position_ids=torch.tensor([[position]]))
            assert torch.equal(cos[row], alone_cos[0, 0].float()) and torch.equal(sin[row], alone_sin[0, 0].float())
    assert len(table.cos) >= 301  # grown as the steps reached further


def test_a_dynamic_rope_gets_each_steps_own_rows() -> None:
    """Dynamic rope types change their frequencies with the positions seen: no table made ahead."""
    module = rotary(rope_type="dynamic", factor=2.0)
    table = RotaryTable(module, torch.float32, torch.device("cpu"))
    positions = torch.tensor([100, 101])
    rows, cos, sin = table.lookup(positions, 102)
    expected_cos, expected_sin = module(torch.empty(0), position_ids=positions[None])
    assert torch.equal(rows, torch.arange(2))
    assert torch.equal(cos, expected_cos[0]) and torch.equal(sin, expected_sin[0])
