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
from core.runtime.weights.fused import head_weights, layer_weights

PROMPT_CHUNK = 64
"""Tokens of a prompt fed at a time: the scores of a chunk ``[tokens, heads, cache]`` stay small."""

HEAD_DIMS = (16, 32, 64, 80, 96, 128)
"""The head sizes the kernel's attention takes (``row_attention.h``: whole pairs of vectors of 8)."""

EMBEDDING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""The embedding tables the kernel reads (it looks up each token's row itself)."""


def why_not_int8_decoder(model: Any) -> str | None:
    """Why the int8 decoder cannot run ``model`` (``None`` when it can): it takes a LLaMA-family model whose
    projections are joined int8 ones (``core.runtime.weights.fused``), an int8 head, and an x86-64 processor
    with AVX2."""
    if not kernels.supported():
        return "our kernels need an x86-64 processor with AVX2 and the kernel sources"
    weights, head = layer_weights(model), head_weights(model)
    if weights is None or head is None:
        return "no weights it can read"
    if any(len(layer) != 2 + 3 * 4 for layer in weights):
        return "projections not joined"
    if any(t.dtype != torch.int8 for layer in weights for t in layer[2:6]) or head[1].dtype != torch.int8:
        return "not int8 weights"
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if head_dim not in HEAD_DIMS or heads % kv_heads:
        return f"head size {head_dim} with {heads} heads over {kv_heads}"
    embedding = model.model.embed_tokens
    if type(embedding) is not torch.nn.Embedding or embedding.weight.dtype not in EMBEDDING_DTYPES:
        return "an embedding other than a plain fp32, bf16 or fp16 table"
    return None


@dataclass(frozen=True)
class Int8Decoder:
    """A model's tensors as ``lookahead::int8_decoder`` takes them (norms and scales in fp32, made once) in
    the kernel's ``Int8Model`` object, which checks them once: a step passes that one object, since the
    dispatcher converts every tensor of a list argument on every call, and a model has a few hundred. The
    kernels must be loaded (:func:`~core.runtime.compiled.kernels.load`)."""

    tensors: torch.ScriptObject  # lookahead's Int8Model
    embeddings: torch.Tensor  # the model's embedding table [vocabulary, hidden]
    head_dim: int
    source: tuple[int, ...]  # where the model's tensors lie: a model converted since reads otherwise

    @classmethod
    def of(cls, model: Any) -> Int8Decoder:
        """The decoder of ``model`` (which :func:`why_not_int8_decoder` accepts). Where the kernel multiplies
        bytes (AVX-512 VNNI) it reads the weights packed for it: a copy of them, made here."""
        weights, head = layer_weights(model), head_weights(model)
        assert weights is not None and head is not None
        packs = kernels.packs_weights()

        def read(weight: torch.Tensor) -> torch.Tensor:
            return torch.ops.lookahead.int8_pack(weight) if packs else weight

        tensors: list[torch.Tensor] = []
        biases: list[torch.Tensor | None] = []
        for layer in weights:
            norms, (qkv, o, gate_up, down), scales, layer_biases = layer[:2], layer[2:6], layer[6:10], layer[10:14]
            half = gate_up.shape[0] // 2  # type: ignore[union-attr]
            projections = (qkv, o, gate_up[:half], gate_up[half:], down)  # type: ignore[index]
            qkv_scales, o_scales, gate_up_scales, down_scales = (s.float().contiguous() for s in scales)  # type: ignore[union-attr]
            tensors += [*(n.float().contiguous() for n in norms), *(read(p) for p in projections)]  # type: ignore[union-attr,arg-type]
            tensors += [qkv_scales, o_scales, gate_up_scales[:half], gate_up_scales[half:], down_scales]
            biases += [None if b is None else b.float().contiguous() for b in layer_biases]
        norm, weight, scales, bias = head
        assert scales is not None
        tensors += [norm.float().contiguous(), read(weight), scales.float().contiguous()]
        biases.append(None if bias is None else bias.float().contiguous())
        config = model.config
        heads = config.num_attention_heads
        embeddings = model.model.embed_tokens.weight.detach().contiguous()
        held = torch.classes.lookahead.Int8Model(
            embeddings,
            tensors,
            [torch.empty(0) if b is None else b for b in biases],  # empty: no bias
            heads,
            config.num_key_value_heads,
            float(model.model.layers[0].input_layernorm.variance_epsilon),
            float(model.model.norm.variance_epsilon),
        )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(held, embeddings, head_dim, _source(model))

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


def _source(model: Any) -> tuple[int, ...]:
    """Where each of the model's parameters and buffers lies: converting or replacing any of them moves one."""
    return tuple(t.data_ptr() for t in itertools.chain(model.parameters(), model.buffers()))
