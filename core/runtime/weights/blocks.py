"""Weights kept in a GGUF block format (Q4_K, Q6_K, Q5_0, Q8_0) exactly as the file stores them.

A model loaded from a GGUF file keeps each weight's blocks as a view of the memory-mapped file: nothing is
converted or copied, so the model takes the file's memory and a warm load only maps it. The int8 decoder
(``core.runtime.compiled.int8_decoder``) reads the blocks directly, and so does ``BlockLinear.forward``
(transformers' own forward, as ``generate`` runs it) through the kernels' ``block_linear``, with the decoder's
arithmetic. Where the kernels cannot run (no AVX2, no compiler) ``forward`` dequantizes the whole weight on every
call through ``gguf``'s reference code: correct, and slow.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Q5_0, Q8_0, Q4_K, Q6_K = 6, 8, 12, 14
"""The GGUF (ggml) type ids read as stored."""

BLOCK_FORMATS: dict[int, tuple[str, int, int]] = {
    Q5_0: ("Q5_0", 32, 22),
    Q8_0: ("Q8_0", 32, 34),
    Q4_K: ("Q4_K", 256, 144),
    Q6_K: ("Q6_K", 256, 210),
}
"""Each block format: its name, the weights a block holds and the block's bytes."""


def row_bytes(format_id: int, inputs: int) -> int:
    """The bytes of one output channel's row of blocks over ``inputs`` inputs."""
    _, weights, size = BLOCK_FORMATS[format_id]
    return inputs // weights * size


def reads_as_stored(format_id: int, inputs: int) -> bool:
    """Whether a weight of this GGUF type with rows of ``inputs`` inputs is kept in its blocks."""
    return format_id in BLOCK_FORMATS and inputs % BLOCK_FORMATS[format_id][1] == 0


def dequantize(blocks: torch.Tensor, format_id: int) -> torch.Tensor:
    """The fp32 weight ``[rows, inputs]`` of ``blocks`` (uint8 ``[rows, row bytes]``), by ``gguf``'s own code."""
    import numpy as np  # numpy and gguf: only for a GGUF model
    from gguf import GGMLQuantizationType, quants

    values = quants.dequantize(blocks.numpy(), GGMLQuantizationType(format_id))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


class BlockLinear(nn.Module):
    """``y = x @ W.T + bias`` with ``W`` in GGUF blocks: ``blocks`` uint8 ``[out, row bytes]``."""

    def __init__(self, blocks: torch.Tensor, format_id: int, in_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        if not reads_as_stored(format_id, in_features) or blocks.shape[1] != row_bytes(format_id, in_features):
            raise ValueError(
                f"GGUF type {format_id} weights of {in_features} inputs in rows of {blocks.shape[1]} bytes"
            )
        self.format_id, self.in_features, self.out_features = format_id, in_features, blocks.shape[0]
        self.register_buffer("blocks", blocks, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    @property
    def format_name(self) -> str:
        return BLOCK_FORMATS[self.format_id][0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and kernels_run():
            rows = x.reshape(-1, self.in_features).to(torch.float32)
            y = torch.ops.lookahead.block_linear(rows, self.blocks, self.format_id, self.bias)
            return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        weight = dequantize(self.blocks, self.format_id).to(x.dtype)
        return F.linear(x, weight, None if self.bias is None else self.bias.to(x.dtype))


@functools.cache
def kernels_run() -> bool:
    """Whether our kernels run here (built and loaded on the first call); else block products dequantize."""
    from core.runtime.compiled import kernels  # compiled imports this module: kernels only when a forward runs

    if not kernels.supported():
        return False
    try:
        kernels.load()
    except Exception:  # no compiler, say: the reference path stays
        return False
    return True


class BlockEmbedding(nn.Module):
    """A token embedding whose table stays in GGUF blocks: each looked-up row is dequantized on its own."""

    dtype = torch.float32  # the rows it gives
    """The dtype of the rows it gives (what ``PreparedModel.dtype`` reads as the activations' dtype)."""

    def __init__(self, blocks: torch.Tensor, format_id: int, embedding_dim: int) -> None:
        super().__init__()
        if not reads_as_stored(format_id, embedding_dim) or blocks.shape[1] != row_bytes(format_id, embedding_dim):
            raise ValueError(f"GGUF type {format_id} embeddings of {embedding_dim} in rows of {blocks.shape[1]} bytes")
        self.format_id, self.embedding_dim, self.num_embeddings = format_id, embedding_dim, blocks.shape[0]
        self.register_buffer("blocks", blocks, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = dequantize(self.blocks[ids.reshape(-1)], self.format_id)
        return rows.reshape(*ids.shape, self.embedding_dim)


def block_format(module: Any) -> int | None:
    """The GGUF type of a block module's weight (``None`` for any other module)."""
    return module.format_id if isinstance(module, BlockLinear | BlockEmbedding) else None


def activation_dtype(model: Any) -> torch.dtype:
    """The dtype of the model's activations: its input embedding's table, or what a block embedding gives."""
    embedding = model.get_input_embeddings()
    return embedding.dtype if isinstance(embedding, BlockEmbedding) else embedding.weight.dtype
