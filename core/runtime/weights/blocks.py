"""Weights kept in a GGUF block format (Q4_K, Q6_K, Q5_0, Q8_0) exactly as the file stores them.

A model loaded from a GGUF file keeps each weight's blocks as a view of the memory-mapped file: nothing is
converted, so the model takes the file's memory and a warm load only maps it. The one copy: where the kernels
run, a weight of whole groups of 8 rows is interleaved 8 rows at a time (:data:`INTERLEAVED_FORMATS`, the
kernels' ``interleave``: the same blocks, laid out so that 8 rows share one decoding of the scales, nibbles and
high bits and a vector holds a lane a row), and the loader gives back the file's pages it read for it. The int8 decoder
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


Q5_0_X8, Q8_0_X8, Q4_K_X8, Q6_K_X8 = 106, 108, 112, 114
"""The block formats interleaved by 8 rows (not GGUF types: the kernels' layouts, made at load by
:func:`interleave`; ``block_products.h`` gives them byte by byte). A Q4_K_X8 group's block of 256 inputs: the 8 rows' d and dmin
(fp16), their 8 sub-blocks' scales ``[sub-block][row]`` and minimums ``[pair][row][2]`` (one byte each), then the
nibbles, byte ``256 c + 32 t + 4 r + i`` being row ``r``'s byte ``32 c + 4 t + i``. Q6_K_X8's: the rows' d, their
16 scales ``[group][row]``, then per half ``h`` and step ``t`` the rows' 4 bytes of ``ql[64 h + 4 t]``, of
``ql[64 h + 32 + 4 t]`` and of ``qh[32 h + 4 t]``. Q5_0_X8's block of 32 inputs: the rows' d, 8 words of high bits
(word ``v``'s bit ``4 r + i`` row ``r``'s bit ``4 v + i``), then byte ``48 + 32 t + 4 r + i`` row ``r``'s
``qs[4 t + i]``. Q8_0_X8's: the rows' d, then byte ``16 + 32 v + 4 r + i`` row ``r``'s weight ``4 v + i``."""

INTERLEAVED = 8
"""Rows a group holds."""

INTERLEAVED_FORMATS = {Q4_K: Q4_K_X8, Q6_K: Q6_K_X8, Q5_0: Q5_0_X8, Q8_0: Q8_0_X8}
"""Each format interleaved at load, and its interleaved format."""

_STORED = {interleaved: stored for stored, interleaved in INTERLEAVED_FORMATS.items()}
_GROUP_BLOCK_BYTES = {
    Q4_K_X8: INTERLEAVED * 144 + 32,
    Q6_K_X8: INTERLEAVED * 210,
    Q5_0_X8: INTERLEAVED * 22,
    Q8_0_X8: INTERLEAVED * 34,
}
"""A group's block: the 8 rows' blocks (Q4_K's with its scales unpacked, 32 bytes more)."""


def row_bytes(format_id: int, inputs: int) -> int:
    """The bytes of one output channel's row of blocks over ``inputs`` inputs (of a group of 8 rows where
    interleaved)."""
    if format_id in _GROUP_BLOCK_BYTES:
        return inputs // BLOCK_FORMATS[_STORED[format_id]][1] * _GROUP_BLOCK_BYTES[format_id]
    _, weights, size = BLOCK_FORMATS[format_id]
    return inputs // weights * size


def interleaves(format_id: int, rows: int) -> bool:
    """Whether a weight of this type and rows is interleaved at load where the kernels run (whole groups)."""
    return format_id in INTERLEAVED_FORMATS and rows % INTERLEAVED == 0


def interleave(blocks: torch.Tensor, format_id: int) -> tuple[torch.Tensor, int]:
    """A block format weight's blocks ``[rows, row bytes]`` interleaved ``[rows / 8, group row bytes]``, and their
    format (the kernels must run: :func:`kernels_run`)."""
    return torch.ops.lookahead.interleave(blocks, format_id), INTERLEAVED_FORMATS[format_id]


def stored_format(format_id: int) -> int:
    """The GGUF type of a weight's blocks, interleaved or not."""
    return _STORED.get(format_id, format_id)


def as_stored(groups: Any, format_id: int) -> Any:
    """Interleaved groups (numpy uint8 ``[G, group row bytes]``) back as the file's rows ``[8 G, row bytes]``."""
    return {Q4_K_X8: _as_stored_q4_k, Q6_K_X8: _as_stored_q6_k, Q5_0_X8: _as_stored_q5_0, Q8_0_X8: _as_stored_q8_0}[
        format_id
    ](groups)


def _groups(groups: Any, format_id: int) -> tuple[Any, Any]:
    """Interleaved groups ``[G, group row bytes]`` as ``[G, blocks, group block bytes]``, and the file's rows to
    fill, ``[G, 8 rows, blocks, block bytes]``."""
    import numpy as np  # numpy: only for a GGUF model

    g = groups.reshape(groups.shape[0], -1, _GROUP_BLOCK_BYTES[format_id])
    stored_bytes = BLOCK_FORMATS[_STORED[format_id]][2]
    return g, np.empty((g.shape[0], INTERLEAVED, g.shape[1], stored_bytes), dtype=np.uint8)


def _row_parts(part: Any, each: int) -> Any:
    """A group block's part laid ``[item][row][each bytes]`` as each row's items, ``[G, row, blocks, items x each]``."""
    count, blocks = part.shape[:2]
    return (
        part.reshape(count, blocks, -1, INTERLEAVED, each)
        .transpose(0, 3, 1, 2, 4)
        .reshape(count, INTERLEAVED, blocks, -1)
    )


def _as_stored_q8_0(groups: Any) -> Any:
    """:data:`Q8_0_X8` groups back as the file's Q8_0 rows."""
    g, out = _groups(groups, Q8_0_X8)
    out[..., 0:2] = _row_parts(g[..., 0:16], 2)
    out[..., 2:] = _row_parts(g[..., 16:], 4)
    return out.reshape(-1, g.shape[1] * 34)


def _as_stored_q5_0(groups: Any) -> Any:
    """:data:`Q5_0_X8` groups back as the file's Q5_0 rows."""
    import numpy as np  # numpy: only for a GGUF model

    g, out = _groups(groups, Q5_0_X8)
    out[..., 0:2] = _row_parts(g[..., 0:16], 2)
    words = g[..., 16:48].copy().view("<u4")  # [G, B, v]: word v's bit 4 r + i = row r's bit 4 v + i
    rows = 4 * np.arange(INTERLEAVED, dtype=np.uint32)  # row r's bits in a word
    nibbles = words[:, None, :, :] >> rows[None, :, None, None] & 0xF  # [G, row, B, v]
    words_bits = 4 * np.arange(words.shape[-1], dtype=np.uint32)  # word v's in a row's high bits
    out[..., 2:6] = (nibbles << words_bits).sum(-1, dtype=np.uint32).astype("<u4")[..., None].view(np.uint8)
    out[..., 6:] = _row_parts(g[..., 48:], 4)
    return out.reshape(-1, g.shape[1] * 22)


def _as_stored_q6_k(groups: Any) -> Any:
    """:data:`Q6_K_X8` groups back as the file's Q6_K rows."""
    g, out = _groups(groups, Q6_K_X8)
    count, blocks = g.shape[:2]
    out[..., 208:210] = _row_parts(g[..., 0:16], 2)
    out[..., 192:208] = _row_parts(g[..., 16:144], 1)
    steps = g[..., 144:].reshape(count, blocks, 2, 8, 3, INTERLEAVED, 4).transpose(0, 5, 1, 2, 4, 3, 6)
    # steps [G, row, B, half, part, t, 4]: part 0 ql[64 h + 4 t], 1 ql[64 h + 32 + 4 t], 2 qh[32 h + 4 t]
    out[..., 0:128] = steps[:, :, :, :, 0:2].reshape(count, INTERLEAVED, blocks, 128)
    out[..., 128:192] = steps[:, :, :, :, 2].reshape(count, INTERLEAVED, blocks, 64)
    return out.reshape(-1, blocks * 210)


def _as_stored_q4_k(groups: Any) -> Any:
    """:data:`Q4_K_X8` groups (numpy uint8 ``[G, group row bytes]``) back as the file's Q4_K rows
    ``[8 G, row bytes]``: what gguf's own dequantization reads."""
    g, out = _groups(groups, Q4_K_X8)
    count, blocks = g.shape[:2]
    out[..., 0:2] = _row_parts(g[..., 0:16], 2)
    out[..., 2:4] = _row_parts(g[..., 16:32], 2)
    sc = _row_parts(g[..., 32:96], 1)  # [G, 8 rows, B, sub-block]
    m = _row_parts(g[..., 96:160], 2)
    out[..., 4:8] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    out[..., 8:12] = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    out[..., 12:16] = (sc[..., 4:] & 0xF) | ((m[..., 4:] & 0xF) << 4)
    out[..., 16:] = _row_parts(g[..., 160:], 4)
    return out.reshape(-1, blocks * 144)


def reads_as_stored(format_id: int, inputs: int) -> bool:
    """Whether a weight of this GGUF type with rows of ``inputs`` inputs is kept in its blocks."""
    return format_id in BLOCK_FORMATS and inputs % BLOCK_FORMATS[format_id][1] == 0


def dequantize(blocks: torch.Tensor, format_id: int) -> torch.Tensor:
    """The fp32 weight ``[rows, inputs]`` of ``blocks`` (uint8 ``[rows, row bytes]``, or interleaved groups), by
    ``gguf``'s own code."""
    import numpy as np  # numpy and gguf: only for a GGUF model
    from gguf import GGMLQuantizationType, quants

    if format_id in _STORED:
        blocks, format_id = torch.from_numpy(as_stored(blocks.numpy(), format_id)), _STORED[format_id]
    values = quants.dequantize(blocks.numpy(), GGMLQuantizationType(format_id))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


class BlockLinear(nn.Module):
    """``y = x @ W.T + bias`` with ``W`` in GGUF blocks: ``blocks`` uint8 ``[out, row bytes]`` (``[out / 8, group
    row bytes]`` where interleaved)."""

    def __init__(self, blocks: torch.Tensor, format_id: int, in_features: int, bias: torch.Tensor | None) -> None:
        super().__init__()
        if not reads_as_stored(stored_format(format_id), in_features) or blocks.shape[1] != row_bytes(
            format_id, in_features
        ):
            raise ValueError(
                f"GGUF type {format_id} weights of {in_features} inputs in rows of {blocks.shape[1]} bytes"
            )
        rows = blocks.shape[0] * (INTERLEAVED if format_id in _STORED else 1)
        self.format_id, self.in_features, self.out_features = format_id, in_features, rows
        self.register_buffer("blocks", blocks, persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def interleave(self) -> bool:
        """Lay the blocks out 8 rows at a time (:func:`interleave`) where the format and the rows allow it;
        whether it did. Our kernels must run (:func:`kernels_run`)."""
        if not interleaves(self.format_id, self.blocks.shape[0]):
            return False
        self.blocks, self.format_id = interleave(self.blocks, self.format_id)
        return True

    @property
    def format_name(self) -> str:
        """The file's type of the weight (also where interleaved)."""
        return BLOCK_FORMATS[stored_format(self.format_id)][0]

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
