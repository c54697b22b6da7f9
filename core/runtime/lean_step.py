"""A lean forward pass for LLaMA-family models over a preallocated KV cache.

transformers' forward spends a large share of a decoding step on bookkeeping: it concatenates
every layer's cache (60 copies of the whole cache per step for a 30-layer model), builds masks
and output objects. This forward runs the model's own modules (embedding, norms, projections,
MLP, LM head: quantized linears included) and does only the rest itself: rotary embedding,
the cache write in place, attention. The math is transformers' own, op for op: prefill and
1-token steps give bit-identical logits in fp32; a masked (lookahead) step attends without copying
the cache per query group, which rounds differently in the last bits, and a 1-token bf16/fp16 step
on the CPU attends by two matrix products (torch's kernel is several times slower there).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import torch
import torch.nn.functional as F

from core.runtime.compiled.int8_decoder import PROMPT_CHUNK, Int8Decoder
from core.runtime.compiled.package import LayerRunner
from core.runtime.compiled.rows_layer import MAX_ROWS
from core.runtime.compiled.step import MIN_CACHED, CompiledInputs
from core.runtime.kv_cache import StaticKVCache
from core.runtime.rotary import RotaryTable
from core.runtime.step import argmax, causal_mask, over_cache, ranked
from core.runtime.weights.blocks import activation_dtype

COMPILED_LAYERS = "compiled layers"
"""What torch's profiler calls the compiled layers of a step (it does not see into their code)."""


def _profiler_label(name: str) -> contextlib.AbstractContextManager:
    """``name`` for torch's profiler while one runs (``bench --overhead``); nothing otherwise: entering a
    profiler label costs about 0.1 ms a step even when no profiler listens."""
    if torch.autograd.profiler._is_profiler_enabled:
        return torch.profiler.record_function(name)
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=64)
def _last_rows(size: int, keep: int) -> torch.Tensor:
    """The indices of a step's last ``keep`` rows, made once (the kernel only reads them)."""
    return torch.arange(size - keep, size)


class LlamaStep:
    """Feeds steps to a LLaMA-family model (:func:`~core.runtime.architecture.supports_llama_step`), keeping its
    KV cache in a :class:`StaticKVCache`; steps after the prompt run through ``compiled``'s layers where given."""

    def __init__(self, model: Any, capacity: int, compiled: CompiledInputs | None = None) -> None:
        config = model.config
        self.model = model
        self.layers = list(model.model.layers)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scaling = self.head_dim**-0.5
        self._rotate = sys.modules[type(self.layers[0].self_attn).__module__].apply_rotary_pos_emb
        self.cache = StaticKVCache(len(self.layers), capacity)
        self._compiled = compiled
        self._rotary: RotaryTable | None = None  # made on the int8 decoder's first step
        # the int8 decoder's last logits, and their rows' rankings: indices, values (read as lists once asked for)
        self._ranked: tuple[torch.Tensor, list[list[int]], torch.Tensor] | None = None
        self._ranked_values: list[list[float]] | None = None
        self._held_cache: tuple[torch.Tensor, torch.ScriptObject] | None = None  # a first buffer, the decoder's cache

    @property
    def length(self) -> int:
        return self.cache.length

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, keep: int | torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        q = ids.shape[0]
        past = self.cache.length
        self.cache.reserve(past + q)
        compiled = self._compiled
        if compiled is not None and compiled.decoder is not None:
            return self._decoded(compiled.decoder, ids, positions, mask, keep)
        inner = self.model.model
        hidden = inner.embed_tokens(ids[None])
        cos, sin = inner.rotary_emb(hidden, position_ids=positions[None])
        if compiled is not None and past >= MIN_CACHED:
            if q == 1 and mask is None and compiled.one_token is not None:
                return self._compiled_token(compiled.one_token, hidden, cos, sin)
            if q <= MAX_ROWS and compiled.rows is not None:
                if mask is None:
                    mask = causal_mask(q, hidden.dtype, hidden.device)
                return self._compiled_rows(compiled.rows, hidden, cos, sin, over_cache(mask, past), keep)
        attn_mask, causal = None, False
        if mask is not None:
            attn_mask = over_cache(mask, past)[None, None]
        elif q > 1 and past > 0:
            attn_mask = over_cache(causal_mask(q, hidden.dtype, hidden.device), past)[None, None]
        else:
            causal = q > 1
        for index, layer in enumerate(self.layers):
            residual = hidden
            hidden = layer.input_layernorm(hidden)
            hidden = residual + self._attention(index, layer.self_attn, hidden, cos, sin, attn_mask, causal)
            residual = hidden
            hidden = residual + layer.mlp(layer.post_attention_layernorm(hidden))
        self.cache.advance(q)
        hidden = inner.norm(hidden)[0]
        rows = hidden[-keep:] if isinstance(keep, int) else hidden[keep]
        return self.model.lm_head(rows)

    def _compiled_token(
        self, layer: LayerRunner, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """A 1-token step (its embedding and rotary tables given) through the compiled 1-token layer, the
        last call computing the head. Nothing is cached unless every layer ran."""
        compiled = self._compiled
        assert compiled is not None
        like = hidden.new_empty(1, self.kv_heads, 1, self.head_dim)
        end = self.cache.length + 1
        last = len(compiled.layers) - 1
        with _profiler_label(COMPILED_LAYERS):  # one opaque call per layer
            for index, weights in enumerate(compiled.layers):
                keys, values = self.cache.buffers(index, like)
                head = compiled.head if index == last else compiled.stand_in
                hidden, logits = layer([hidden, cos, sin, keys[:end], values[:end], *head, *weights])
        self.cache.advance(1)
        return logits

    def _compiled_rows(
        self,
        layer: LayerRunner,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        keep: int | torch.Tensor,
    ) -> torch.Tensor:
        """A step of several tokens (their embeddings and rotary tables given, ``mask`` ``[q, length + q]``)
        through the compiled rows layer, the last call computing the head for the rows kept."""
        compiled = self._compiled
        assert compiled is not None
        q = hidden.shape[1]
        like = hidden.new_empty(1, self.kv_heads, q, self.head_dim)
        end = self.cache.length + q
        rows = torch.arange(q - keep, q) if isinstance(keep, int) else keep.contiguous()
        # compiled code reads its inputs with the strides and dtype it was compiled for: a view, or a mask of
        # another dtype, would be read as garbage
        mask = mask.to(hidden.dtype).contiguous()
        first = rows[:1]
        last = len(compiled.layers) - 1
        with _profiler_label(COMPILED_LAYERS):
            for index, weights in enumerate(compiled.layers):
                keys, values = self.cache.buffers(index, like)
                head, kept = (compiled.head, rows) if index == last else (compiled.stand_in, first)
                hidden, logits = layer([hidden, cos, sin, keys[:end], values[:end], mask, kept, *head, *weights])
        self.cache.advance(q)
        return logits

    def _decoded(
        self,
        decoder: Int8Decoder,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        keep: int | torch.Tensor,
    ) -> torch.Tensor:
        """A step through the int8 decoder: every layer and the head in one call, the embedding and the rotary
        tables' rows looked up in it too (between steps every tensor operation runs on flushed caches). A prompt
        (no mask) goes in chunks of :data:`~core.runtime.compiled.int8_decoder.PROMPT_CHUNK` tokens, each
        attending to the cache and causally to itself."""
        q = ids.shape[0]
        rows = _last_rows(q, keep) if isinstance(keep, int) else keep
        if self._rotary is None:
            self._rotary = RotaryTable(self.model.model.rotary_emb, activation_dtype(self.model), ids.device)
        positions, cos, sin = self._rotary.lookup(positions, self.cache.capacity)
        keys, values = self.cache.all_buffers(self.kv_heads, self.head_dim, decoder.cache_dtype, ids.device)
        if self._held_cache is None or self._held_cache[0] is not keys[0]:  # made, or grown into new buffers
            self._held_cache = keys[0], decoder.hold_cache(keys, values)
        chunk = q if mask is not None else PROMPT_CHUNK
        logits, indices, values = [], [], []
        with _profiler_label(COMPILED_LAYERS):
            for start in range(0, q, chunk):
                end = min(q, start + chunk)
                # a boolean index is a few tensor operations a step: only a prompt in chunks needs one
                kept = rows if end - start == q else rows[(rows >= start) & (rows < end)] - start
                rows_logits, rows_indices, rows_values = decoder(
                    ids[start:end],
                    positions[start:end],
                    cos,
                    sin,
                    self._held_cache[1],
                    self.cache.length + start,
                    mask,
                    kept,
                )
                logits.append(rows_logits)
                indices.append(rows_indices)
                values.append(rows_values)
        self.cache.advance(q)
        if len(logits) > 1:
            logits, indices, values = [torch.cat(logits)], [torch.cat(indices)], [torch.cat(values)]
        self._ranked, self._ranked_values = (logits[0], indices[0].tolist(), values[0]), None
        return logits[0]

    def greedy(self, logits: torch.Tensor) -> list[int]:
        if self._ranked is not None and self._ranked[0] is logits:
            return [ranks[0] for ranks in self._ranked[1]]
        return argmax(logits).tolist()

    def ranking(self, logits: torch.Tensor, row: int) -> tuple[list[float], list[int]]:
        if self._ranked is not None and self._ranked[0] is logits:
            if self._ranked_values is None:
                self._ranked_values = self._ranked[2].tolist()
            return self._ranked_values[row], self._ranked[1][row]
        return ranked(logits[row])

    def _attention(
        self,
        index: int,
        attn: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
    ) -> torch.Tensor:
        q = hidden.shape[1]
        shape = (1, q, -1, self.head_dim)
        query = attn.q_proj(hidden).view(shape).transpose(1, 2)
        key = attn.k_proj(hidden).view(shape).transpose(1, 2)
        value = attn.v_proj(hidden).view(shape).transpose(1, 2)
        query, key = self._rotate(query, key, cos, sin)
        key, value = self.cache.write(index, key, value)
        if q == 1 and mask is None and query.dtype != torch.float32 and query.device.type == "cpu":
            out = self._one_query_attention(query, key, value)
        else:  # grouped-query attention without copies of the cache per group (transformers copies it for a masked step)
            out = F.scaled_dot_product_attention(
                query,
                key,
                value,
                attn_mask=mask,
                is_causal=causal,
                scale=self.scaling,
                enable_gqa=self.heads > self.kv_heads,
            )
        return attn.o_proj(out.transpose(1, 2).reshape(1, q, -1))

    def _one_query_attention(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """Attention of one new token in bf16/fp16 on the CPU as two matrix products, softmax in fp32.

        torch's CPU kernel is 5-10x slower here (0.37 ms against 0.08 per layer at 256 cached tokens,
        1.2 ms against 0.11 at 1024, bf16, one thread). The query heads of a group share one product.
        """
        groups = self.heads // self.kv_heads
        grouped = query.reshape(1, self.kv_heads, groups, self.head_dim)
        scores = torch.matmul(grouped, key.transpose(-1, -2)) * self.scaling
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
        return torch.matmul(weights, value).reshape(1, self.heads, 1, self.head_dim)

    def pass_over(self, tokens: int) -> None:
        """Zero entries: attention reads every entry alike, so a step after them costs what it costs after a prompt."""
        self.cache.reserve(self.cache.length + tokens)
        self.cache.advance(tokens)

    def keep(self, past: int, step_size: int, sources: list[int]) -> None:
        self.cache.keep(past, step_size, sources)
