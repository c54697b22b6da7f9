"""Randomly initialised LLaMA models of real shapes, built directly on the target device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from core.bench.gpu.quantize import quantize_linears


@dataclass(frozen=True)
class Shape:
    """A LLaMA architecture by its sizes (the weights are random)."""

    name: str
    like: str  # the published model with this shape
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    init_std: float = 0.02  # transformers' LLaMA default; the tiny shape needs more to avoid repeating one token

    def config(self) -> Any:
        return LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=4096,
            rope_theta=500000.0,
            tie_word_embeddings=self.tied,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=2,
            initializer_range=self.init_std,
        )

    def parameters(self) -> int:
        """Parameter count (embedding counted once when tied)."""
        head_dim = self.hidden // self.heads
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * layer + self.hidden


SHAPES: dict[str, Shape] = {
    "tiny": Shape("tiny", "a 2-layer test model", 64, 128, 2, 4, 2, 256, True, init_std=0.1),
    "1b": Shape("1b", "Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256, True),
    "8b": Shape("8b", "Llama-3-8B", 4096, 14336, 32, 32, 8, 128256, False),
    "13b": Shape("13b", "Llama-2-13B", 5120, 13824, 40, 40, 40, 32000, False),
}

MODES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
QUANT_MODES = ("nf4", "int8")


def random_model(shape: Shape, mode: str, device: torch.device, seed: int = 0) -> Any:
    """A seeded random ``LlamaForCausalLM`` of ``shape`` on ``device``, in eval mode.

    ``mode`` is a dtype name (fp32, fp16, bf16), or ``nf4``/``int8`` for bitsandbytes 4-bit NF4 or
    8-bit linear layers (fp16 everywhere else). Tensors are created on the device itself, so the
    initialisation runs there (seconds for 8B on a GPU, no host copy of the weights).
    """
    dtype = MODES.get(mode, torch.float16)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(shape.config(), dtype=dtype, attn_implementation="sdpa")
    if mode in QUANT_MODES:
        quantize_linears(model, mode, dtype)
    return model.eval()


def weight_bytes(model: Any) -> int:
    """Bytes held by the model's parameters and buffers (quantized storage as stored)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())
