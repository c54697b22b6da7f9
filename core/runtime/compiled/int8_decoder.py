"""The int8 decoder: a whole decoding step of an int8 model, every layer and the head, in one call into our kernel.

Through compiled layers a step is thirty calls, each some ten parallel regions (products, attention,
inductor's fused loops) that fork and join the threads, and allocations and conversions per operator:
beside reading the weights, a quarter to a third of a 1-token step. ``lookahead::int8_decoder``
(:mod:`~core.runtime.compiled.kernels`) runs the whole step in one parallel region, its threads
meeting at eight barriers a layer, and needs nothing compiled per model (only the kernel library, built
once). Each row is computed on its own, so every token of a lookahead step gets exactly the logits of a
1-token step, and it takes any number of rows: a prompt goes through it too, in chunks of
:data:`PROMPT_CHUNK` tokens, where the eager step widens every int8 weight for every product.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from core.runtime.compiled import kernels
from core.runtime.weights.blocks import BlockEmbedding, BlockLinear

PROMPT_CHUNK = 64
"""Tokens of a prompt fed at a time: the scores of a chunk ``[tokens, heads, cache]`` stay small."""

HEAD_DIMS = (16, 32, 64, 80, 96, 128)
"""The head sizes the kernel's attention takes (``row_attention.h``: whole pairs of vectors of 8)."""

EMBEDDING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The embedding tables the kernel reads (it looks up each token's row itself)."""


INT8 = 0
"""The kernel's format code of an int8 weight with a scale per output channel (a GGUF type id otherwise)."""


def _projections(layer: Any) -> list[Any]:
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]


def _format(linear: Any) -> int | None:
    """The kernel's format of a projection's weight: int8 (``core.runtime.weights.quantized``), a GGUF block
    format (``core.runtime.weights.blocks``), or ``None`` where it cannot read it."""
    if isinstance(linear, BlockLinear):
        return linear.format_id
    qweight = getattr(linear, "qweight", None)
    return INT8 if isinstance(qweight, torch.Tensor) and qweight.dtype == torch.int8 else None


def why_not_int8_decoder(model: Any) -> str | None:
    """Why the int8 decoder cannot run ``model`` (``None`` when it can): it takes a LLaMA-family model whose
    projections and head are int8 or GGUF block weights, and an x86-64 processor with AVX2."""
    if not kernels.supported():
        return "our kernels need an x86-64 processor with AVX2 and the kernel sources"
    linears = [linear for layer in model.model.layers for linear in _projections(layer)] + [model.lm_head]
    if any(_format(linear) is None for linear in linears):
        return "not int8 or GGUF block weights"
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if head_dim not in HEAD_DIMS or heads % kv_heads:
        return f"head size {head_dim} with {heads} heads over {kv_heads}"
    embedding = model.model.embed_tokens
    plain = type(embedding) is torch.nn.Embedding and embedding.weight.dtype in EMBEDDING_DTYPES
    if not plain and not isinstance(embedding, BlockEmbedding):
        return "an embedding other than a plain fp32, bf16 or fp16 table or GGUF blocks"
    return None


@dataclass(frozen=True)
class Int8Decoder:
    """A model's tensors as ``lookahead::int8_decoder`` takes them (norms and scales in fp32, made once) in
    the kernel's ``Int8Model`` object, which checks them once: a step passes that one object, since the
    dispatcher converts every tensor of a list argument on every call, and a model has a few hundred. The
    kernels must be loaded (:func:`~core.runtime.compiled.kernels.load`)."""

    tensors: torch.ScriptObject  # lookahead's Int8Model
    cache_dtype: torch.dtype  # the KV cache's: the model's dtype, bf16 for GGUF block weights
    head_dim: int
    source: tuple[int, ...]  # where the model's tensors lie: a model converted since reads otherwise
    formats: tuple[str, ...]  # the weights' formats, most bytes first (``int8``, ``Q4_K``, ...)

    @classmethod
    def of(cls, model: Any) -> Int8Decoder:
        """The decoder of ``model`` (which :func:`why_not_int8_decoder` accepts). Where the kernel multiplies
        bytes (AVX-512 VNNI) it reads int8 weights packed for it: a copy of them, made here. GGUF blocks are
        read where they lie."""
        packs = kernels.packs_weights()
        formats: list[int] = []
        bytes_by_format: dict[str, int] = {}

        def matrix(linear: Any) -> tuple[torch.Tensor, torch.Tensor]:
            """The weight as the kernel reads it, and its fp32 scales (empty for blocks); notes its format."""
            code = _format(linear)
            assert code is not None
            formats.append(code)
            if code == INT8:
                weight = linear.qweight.contiguous()
                bytes_by_format["int8"] = bytes_by_format.get("int8", 0) + weight.numel()
                packed = torch.ops.lookahead.int8_pack(weight) if packs else weight
                return packed, linear.scales.float().contiguous()
            name = linear.format_name
            bytes_by_format[name] = bytes_by_format.get(name, 0) + linear.blocks.numel()
            return linear.blocks, torch.empty(0)

        tensors: list[torch.Tensor] = []
        biases: list[torch.Tensor | None] = []
        for layer in model.model.layers:
            q, k, v, o, gate, up, down = _projections(layer)
            norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
            read = [matrix(linear) for linear in (q, k, v, o, gate, up, down)]
            tensors += [*(n.float().contiguous() for n in norms), *(w for w, _ in read), *(s for _, s in read)]
            biases += [_joined_bias([q, k, v]), _bias(o), _joined_bias([gate, up]), _bias(down)]
        weight, scales = matrix(model.lm_head)
        tensors += [model.model.norm.weight.float().contiguous(), weight, scales]
        biases.append(_bias(model.lm_head))
        config = model.config
        heads = config.num_attention_heads
        embedding = model.model.embed_tokens
        if isinstance(embedding, BlockEmbedding):
            table, table_format, cache_dtype = embedding.blocks, embedding.format_id, torch.bfloat16
        else:
            table, table_format = embedding.weight.detach().contiguous(), INT8
            cache_dtype = table.dtype if table.dtype != torch.float16 else torch.float32
        held = torch.classes.lookahead.Int8Model(
            table,
            table_format,
            tensors,
            formats,
            [torch.empty(0) if b is None else b for b in biases],  # empty: no bias
            heads,
            config.num_key_value_heads,
            float(model.model.layers[0].input_layernorm.variance_epsilon),
            float(model.model.norm.variance_epsilon),
        )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        order = tuple(sorted(bytes_by_format, key=bytes_by_format.__getitem__, reverse=True))
        return cls(held, cache_dtype, head_dim, _source(model), order)

    def reads(self, model: Any) -> bool:
        """Whether this decoder still reads ``model``'s tensors: none converted or replaced since. Asked for
        every answer, so it only compares where the tensors lie (the full check walks every layer's projections
        in Python, which shows in each answer's first token)."""
        return _source(model) == self.source

    @staticmethod
    def hold_cache(keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.ScriptObject:
        """Each layer's cache ``[capacity, kv_heads, head_dim]`` (bf16 or fp32) as the kernel takes it: an
        ``Int8Cache`` object, checked once, that holds these tensors (a cache grown into new ones needs a new one)."""
        return torch.classes.lookahead.Int8Cache(keys, values)

    def __call__(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: torch.ScriptObject,
        past: int,
        mask: torch.Tensor | None,
        rows: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fp32 logits ``[len(rows), vocabulary]`` of a step of ``q`` tokens, and each row's ranking, found as
        the head's products end: the indices (int64) and values of its :data:`~core.runtime.step.RANKED` highest
        logits, NaN first, equal values by index (the first is torch.max's choice): ``ids`` ``[q]``, each token's row
        ``positions`` ``[q]`` of the rotary tables ``cos`` and ``sin`` ``[P, head_dim]`` (fp32,
        :class:`~core.runtime.rotary.RotaryTable`); the :meth:`hold_cache` of the caches, with ``past``
        entries, this step's written after them; ``mask`` ``[q, q]`` additive among the step's tokens (each sees every
        cached entry), or ``None`` (causal).
        The kernel looks up the tokens' embeddings itself."""
        return torch.ops.lookahead.int8_decoder(self.tensors, ids, positions, cos, sin, cache, past, mask, rows)


def _bias(linear: Any) -> torch.Tensor | None:
    bias = getattr(linear, "bias", None)
    return None if bias is None else bias.detach().float().contiguous()


def _joined_bias(linears: list[Any]) -> torch.Tensor | None:
    """The projections' biases one after another (the kernel adds them to their joined outputs), or ``None``."""
    parts = [_bias(linear) for linear in linears]
    if all(part is None for part in parts):
        return None
    return torch.cat(
        [torch.zeros(linear.out_features) if part is None else part for part, linear in zip(parts, linears)]
    )


def _source(model: Any) -> tuple[int, ...]:
    """Where each of the model's parameters and buffers lies: converting or replacing any of them moves one."""
    return tuple(t.data_ptr() for t in itertools.chain(model.parameters(), model.buffers()))
