"""Streaming decoding: plain (one token per step) and lookahead, on the same loop and timers.

``Decoding`` is an iterator of steps; each step is one forward pass. Consumers stop early by
cancelling the token (checked between steps) or by simply not iterating further. Greedy argmax
is the fast path; a :class:`~core.lookahead.sampling.TokenPolicy` adds logits processors
(repetition penalty, ...) and sampling, for plain and lookahead alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from core.lookahead.config import LookaheadConfig
from core.lookahead.layout import step_layout
from core.lookahead.pool import NGramPool
from core.lookahead.sampling import TokenPolicy, verify_with_policy
from core.lookahead.sliding import sliding_window_of, step_masks
from core.lookahead.stats import DecodeStats, StepTimer
from core.lookahead.verify import verify_greedy
from core.lookahead.window import JacobiWindow


class Cancellable(Protocol):
    """Anything with a ``cancelled`` flag (core.progress.CancelToken); keeps this package free of core."""

    @property
    def cancelled(self) -> bool: ...


@dataclass(frozen=True)
class Step:
    """What one forward pass produced."""

    tokens: list[int]
    seconds: float


class Decoding:
    """One generation, plain or lookahead, as an iterator of :class:`Step`.

    Args:
        model: a transformers causal LM (batch size 1).
        prompt_ids: the prompt's token ids.
        lookahead: lookahead parameters, or ``None`` for plain decoding.
        max_new_tokens: the most tokens to generate.
        eos_token_ids: tokens that end the answer (emitted, then generation stops).
        pool: an n-gram pool to use and grow (e.g. a conversation's); a fresh one if ``None``.
        cancel: checked between steps.
        policy: logits processors and/or sampling; ``None`` is plain greedy (argmax).
    """

    def __init__(
        self,
        model: Any,
        prompt_ids: Sequence[int] | torch.Tensor,
        *,
        lookahead: LookaheadConfig | None = None,
        max_new_tokens: int = 256,
        eos_token_ids: Collection[int] = (),
        pool: NGramPool | None = None,
        cancel: Cancellable | None = None,
        policy: TokenPolicy | None = None,
    ) -> None:
        if isinstance(prompt_ids, torch.Tensor):
            prompt_ids = prompt_ids.reshape(-1).tolist()
        if not prompt_ids:
            raise ValueError("The prompt is empty: give at least one token.")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1 (got {max_new_tokens}).")
        self.model = model
        self.prompt = list(prompt_ids)
        self.config = lookahead
        self.max_new_tokens = max_new_tokens
        self.eos = frozenset(eos_token_ids)
        self.cancel = cancel
        self.policy = policy if policy is not None and (policy.do_sample or policy.processors) else None
        self.device = model.device
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.stats = DecodeStats(mode="lookahead" if lookahead else "plain", prompt_tokens=len(self.prompt))
        self._timer = StepTimer(self.device)
        self._cache: Any = None
        if lookahead is not None:
            self.pool = pool if pool is not None else NGramPool(lookahead.ngram, lookahead.guesses)
            if lookahead.pool_from_prompt:
                self.pool.add_sequence(self.prompt)
            self._window = JacobiWindow(lookahead.window, lookahead.ngram, self.prompt, self.eos, lookahead.seed)
            self._mask_dtype = model.get_input_embeddings().weight.dtype
            self._sliding = sliding_window_of(model.config)

    def __iter__(self) -> Iterator[Step]:
        from transformers import DynamicCache

        # Lookahead moves cache entries by index, so it needs full-attention layers; its mask applies any sliding window.
        self._cache = DynamicCache() if self.config else DynamicCache(config=self.model.config)
        if self.policy is not None:
            span = len(self.prompt) + self.max_new_tokens + (self.config.ngram if self.config else 1)
            self._ids = torch.zeros(1, span, dtype=torch.long, device=self.device)
            self._ids[0, : len(self.prompt)] = torch.tensor(self.prompt, device=self.device)
        try:
            with torch.inference_mode():
                self._timer.start()
                x = self._prefill()
                yield from self._emit([x], self._timer.stop(), prefill=True)
                while self.finish_reason is None:
                    if self.cancel is not None and self.cancel.cancelled:
                        self.finish_reason = "cancelled"
                        return
                    self._timer.start()
                    emitted = self._lookahead_step(x) if self.config else self._plain_step(x)
                    seconds = self._timer.stop()
                    x = emitted[-1]
                    yield from self._emit(emitted, seconds)
        finally:
            self._cache = None  # also when cancelled or abandoned: the KV cache is the big allocation

    def _emit(self, emitted: list[int], seconds: float, *, prefill: bool = False) -> Iterator[Step]:
        room = self.max_new_tokens - len(self.tokens)
        kept: list[int] = []
        for token in emitted[:room]:
            kept.append(token)
            if token in self.eos:
                self.finish_reason = "eos"
                break
        if self.policy is not None and kept:
            start = len(self.prompt) + len(self.tokens)
            self._ids[0, start : start + len(kept)] = torch.tensor(kept, device=self.device)
        self.tokens.extend(kept)
        if self.finish_reason is None and len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = "length"
        self.stats.record(len(kept), seconds, prefill=prefill)
        yield Step(kept, seconds)

    @property
    def _past(self) -> int:
        """Tokens in the KV cache; x (the last emitted token) is never cached yet."""
        return len(self.prompt) + len(self.tokens) - 1

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, keep: int | torch.Tensor,
        mask: torch.Tensor | dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        out = self.model(
            input_ids=ids[None],
            position_ids=positions[None],
            attention_mask=mask,
            cache=self._cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits[0]

    def _choose(self, logits: torch.Tensor) -> int:
        """The next token from the last position's logits row."""
        if self.policy is None:
            return int(logits.argmax())
        return self.policy.choose(self._prefix(()), logits)

    def _prefix(self, extra: Sequence[int]) -> torch.Tensor:
        """``[1, L]`` ids of the sequence so far (x included) followed by ``extra`` guessed tokens."""
        length = len(self.prompt) + len(self.tokens)
        if extra:
            self._ids[0, length : length + len(extra)] = torch.tensor(list(extra), device=self.device)
        return self._ids[:, : length + len(extra)]

    def _prefill(self) -> int:
        ids = torch.tensor(self.prompt, device=self.device)
        positions = torch.arange(len(self.prompt), device=self.device)
        return self._choose(self._forward(ids, positions, 1)[-1])

    def _plain_step(self, x: int) -> list[int]:
        past = self._past
        ids = torch.tensor([x], device=self.device)
        positions = torch.tensor([past], device=self.device)
        self.stats.fed_tokens += 1
        return [self._choose(self._forward(ids, positions, 1)[-1])]

    def _lookahead_step(self, x: int) -> list[int]:
        assert self.config is not None
        cfg, window = self.config, self._window
        cand_len = cfg.ngram - 1
        candidates = self.pool.candidates(x, cfg.guesses)
        layout = step_layout(cfg.window, cand_len, len(window.levels), len(candidates), self._mask_dtype, self.device)
        past = self._past
        self.stats.fed_tokens += layout.size
        flat = window.rows(x)
        for candidate in candidates:
            flat.extend(candidate)
        ids = torch.tensor(flat, device=self.device)
        mask = torch.cat([layout.mask_block.new_zeros(layout.size, past), layout.mask_block], dim=1)
        positions = layout.position_offsets + past
        logits = self._forward(ids, positions, layout.keep_rows, step_masks(mask, positions, past, self._sliding))
        predictions = logits.argmax(dim=-1).tolist()
        new_row = predictions[1 : 1 + cfg.window]
        if self.policy is None:
            chains = [predictions[1 + cfg.window + c * cand_len : 1 + cfg.window + (c + 1) * cand_len] for c in range(len(candidates))]
            best, accepted, emitted = verify_greedy(predictions[0], candidates, chains)
        else:
            policy = self.policy

            def row_scores(c: int, depth: int, tokens: int) -> torch.Tensor:
                row = 0 if c < 0 else 1 + cfg.window + c * cand_len + depth
                return policy.scores(self._prefix(candidates[c][:tokens] if c >= 0 else ()), logits[row])

            best, accepted, emitted = verify_with_policy(candidates, row_scores, policy, self.device)
        self._compact_cache(past, layout.size, layout.candidate_start + best * cand_len, accepted)
        window.update(x, new_row, self.pool)
        self._add_output_ngrams(emitted)
        return emitted

    def _compact_cache(self, past: int, step_size: int, accepted_start: int, accepted: int) -> None:
        """Keep x and the accepted candidate tokens (moved right after x); drop the rest of the step."""
        if accepted:
            src = torch.arange(past + accepted_start, past + accepted_start + accepted, device=self.device)
            for layer in self._cache.layers:
                layer.keys[:, :, past + 1 : past + 1 + accepted] = layer.keys[:, :, src]
                layer.values[:, :, past + 1 : past + 1 + accepted] = layer.values[:, :, src]
        self._cache.crop(-(step_size - 1 - accepted))

    def _add_output_ngrams(self, emitted: list[int]) -> None:
        """Index the n-grams that end in the tokens just emitted: answers often repeat themselves."""
        n = self.pool.ngram
        before = self.tokens if len(self.tokens) >= n - 1 else self.prompt + self.tokens
        tail = before[len(before) - (n - 1) :] + emitted
        for i in range(len(tail) - n + 1):
            self.pool.add(tail[i : i + n])
