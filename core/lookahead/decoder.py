"""Streaming decoding: plain (one token per step) and lookahead, on the same loop and timers.

``Decoding`` is an iterator of steps; each step is one forward pass. Consumers stop early by
cancelling the token (checked between steps) or by simply not iterating further. Greedy argmax
is the fast path; a :class:`~core.lookahead.sampling.TokenPolicy` adds logits processors
(repetition penalty, ...) and sampling, for plain and lookahead alike. A :class:`StepChooser`
picks each step's setting (plain, verification only, or a lookahead W, N, G) and learns from what
it measured: every setting is exact, so switching between steps never changes the output.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from core.lookahead.config import LookaheadConfig
from core.lookahead.context import ContextIndex
from core.lookahead.finish import FinishReason
from core.lookahead.guesses import Guesses, common_prefix, tree_size
from core.lookahead.memory import MIN_CONTEXT, AnswerMemory
from core.lookahead.pool import NGramPool
from core.lookahead.sampling import TokenPolicy, verify_with_policy
from core.lookahead.stats import DecodeStats
from core.lookahead.step_shape import step_shape
from core.lookahead.tree import build_tree
from core.lookahead.verify import verify_greedy
from core.lookahead.window import JacobiWindow
from core.runtime.prepared import PreparedModel, prepared
from core.runtime.step import ModelStep
from core.runtime.timing import StepTimer

REPORT_BATCH = 16
"""Steps whose measurements and shadow scores go to the chooser together. Between steps the interpreter runs
with caches the step's weights just flushed: each visit to the chooser's code costs several times its warm
time. Its choices then lag its measurements by at most this many steps, a fraction of the steps it averages
them over."""


class Cancellable(Protocol):
    """Anything with a ``cancelled`` flag (core.progress.CancelToken); keeps this package free of core."""

    @property
    def cancelled(self) -> bool: ...


class StepChooser(Protocol):
    """Chooses the setting of each step and learns from the steps run (core.autotune.chooser.AutoChooser)."""

    @property
    def settings(self) -> Sequence[LookaheadConfig | None]:
        """Every setting it may choose; ``None`` is a plain step."""
        ...

    def choose(self) -> LookaheadConfig | None: ...

    def observe(self, setting: LookaheadConfig | None, tokens: int, seconds: float, fed: int) -> None: ...

    @property
    def shadow_settings(self) -> Sequence[LookaheadConfig]:
        """Verification-only settings to score after every step, run or not (empty: none)."""
        ...

    def observe_shadows(self, scores: Sequence[tuple[LookaheadConfig, int, int]]) -> None:
        """Once a step's answer is known: ``(setting, tokens, fed)`` for each shadow setting, what it would have
        emitted and fed."""
        ...


@dataclass(frozen=True)
class Step:
    """What one forward pass produced."""

    tokens: list[int]
    seconds: float


def setting_label(setting: LookaheadConfig | None) -> str:
    """How a step's setting is named in statistics: ``plain`` or ``W7 N5 G7``."""
    return setting.label if setting is not None else "plain"


class Decoding:
    """One generation, plain, lookahead or chosen step by step, as an iterator of :class:`Step`.

    Args:
        model: a transformers causal LM (batch size 1), or a :class:`~core.runtime.prepared.PreparedModel`
            (the compiled layers, where they were kept, then run its steps).
        prompt_ids: the prompt's token ids (a 1-row tensor is accepted).
        lookahead: lookahead parameters, or ``None`` for plain decoding.
        chooser: chooses each step's setting instead (``lookahead`` must then be ``None``).
        max_new_tokens: the most tokens to generate.
        eos_token_ids: tokens that end the answer (emitted, then generation stops).
        pool: an n-gram pool to use and grow (e.g. a conversation's); a fresh one if ``None``.
        memory: the model's earlier answers, read for guesses when greedy (its owner adds this answer when it ends).
        cancel: checked between steps.
        policy: logits processors and/or sampling; ``None`` is plain greedy (argmax).
    """

    def __init__(
        self,
        model: PreparedModel | Any,
        prompt_ids: Sequence[int] | torch.Tensor,
        *,
        lookahead: LookaheadConfig | None = None,
        chooser: StepChooser | None = None,
        max_new_tokens: int = 256,
        eos_token_ids: Collection[int] = (),
        pool: NGramPool | None = None,
        memory: AnswerMemory | None = None,
        cancel: Cancellable | None = None,
        policy: TokenPolicy | None = None,
    ) -> None:
        if isinstance(prompt_ids, torch.Tensor):
            if prompt_ids.dim() > 1 and prompt_ids.shape[0] != 1:
                raise ValueError(f"Decoding takes one sequence at a time (got a batch of {prompt_ids.shape[0]}).")
            prompt_ids = prompt_ids.reshape(-1).tolist()
        if not prompt_ids:
            raise ValueError("The prompt is empty: give at least one token.")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1 (got {max_new_tokens}).")
        if lookahead is not None and chooser is not None:
            raise ValueError("Give either fixed lookahead settings or a step chooser, not both.")
        self.prepared = prepared(model)
        self.model = self.prepared.model
        self.prompt = list(prompt_ids)
        self.config = lookahead
        self.chooser = chooser
        self.max_new_tokens = max_new_tokens
        self.eos = frozenset(eos_token_ids)
        self.cancel = cancel
        self.policy = policy if policy is not None and (policy.do_sample or policy.processors) else None
        self.device = self.model.device
        self.tokens: list[int] = []
        self._seen = set(self.prompt)  # every token of the text so far (what a repetition penalty lowers)
        self.finish_reason: FinishReason | None = None
        mode = "auto" if chooser is not None else "lookahead" if lookahead else "plain"
        self.stats = DecodeStats(mode=mode, prompt_tokens=len(self.prompt))
        self._timer = StepTimer(self.device)
        self._model_step: ModelStep | None = None
        self._windows: dict[tuple[int, int], JacobiWindow] = {}
        self._shadows: list[LookaheadConfig] = list(chooser.shadow_settings) if chooser is not None else []
        self._scored_span = max((s.ngram for s in self._shadows), default=0)  # tokens after a step that score it
        self._pending: deque[tuple[int, Guesses]] = deque()  # (tokens before the step, its lookup), to score
        self._observed: list[tuple[LookaheadConfig | None, int, float, int]] = []  # (setting, tokens, seconds, fed)
        settings = [s for s in (chooser.settings if chooser else [lookahead]) if s is not None]
        self.pool: NGramPool | None = None
        if settings:
            _check_attention(self.model)
            self.pool = (
                pool
                if pool is not None
                else NGramPool(max(s.ngram for s in settings), max(s.guesses for s in settings))
            )
            if settings[0].pool_from_prompt:
                self.pool.add_sequence(self.prompt)
            self._seed = settings[0].seed
            self._pool_from_output = settings[0].pool_from_output
            self._context = ContextIndex()
            self._context.extend(self.prompt, record=settings[0].pool_from_prompt)
            self._max_step = max(s.max_step_tokens for s in settings)
            # greedy only: a sampled step's draws depend on the guesses it verifies, and a seeded answer must
            # repeat while the memory grows between answers
            self._memory = memory if self.policy is None or not self.policy.do_sample else None
            self._longest_guess = max(s.ngram for s in settings) - 1
            self._looked_up: tuple[int, Guesses] = (-1, Guesses(0, (), ()))  # (text length, its lookup)
            self._mask_dtype = self.prepared.dtype

    def __iter__(self) -> Iterator[Step]:
        span = len(self.prompt) + self.max_new_tokens + (self._max_step if self.pool is not None else 1)
        self._model_step = self.prepared.step(span, lookahead=self.pool is not None)
        if self.policy is not None:
            self._ids = torch.zeros(1, span, dtype=torch.long, device=self.device)
            self._ids[0, : len(self.prompt)] = torch.tensor(self.prompt, device=self.device)
            self._ids_written = len(self.prompt)  # the text's ids written so far (when the processors ask)
        try:
            with torch.inference_mode():
                self._timer.start()
                x = self._prefill()
                if self.pool is not None:
                    self._context.extend([x], record=self._pool_from_output)
                yield from self._emit([x], self._timer.stop(), None, prefill=True)
                while self.finish_reason is None:
                    if self.cancel is not None and self.cancel.cancelled:
                        self.finish_reason = FinishReason.CANCELLED
                        self._report()
                        return
                    setting = self.chooser.choose() if self.chooser is not None else self.config
                    if self._shadows:  # what each would verify now; scored once the answer is known
                        self._pending.append((len(self.tokens), self._guesses(x)))
                    fed_before = self.stats.fed_tokens
                    self._timer.start()
                    emitted = self._lookahead_step(x, setting) if setting is not None else self._plain_step(x)
                    seconds = self._timer.stop()
                    if self.chooser is not None:
                        self._observed.append((setting, len(emitted), seconds, self.stats.fed_tokens - fed_before))
                    if self.pool is not None:
                        if self._pool_from_output:
                            self._add_output_ngrams(emitted)
                        self._context.extend(emitted, record=self._pool_from_output)
                    x = emitted[-1]
                    yield from self._emit(emitted, seconds, setting)
                    if len(self._observed) >= REPORT_BATCH or self.finish_reason is not None:
                        self._report()
        finally:
            self._model_step = None  # also when cancelled or abandoned: the KV cache is the big allocation

    def _emit(
        self, emitted: list[int], seconds: float, setting: LookaheadConfig | None, *, prefill: bool = False
    ) -> Iterator[Step]:
        room = self.max_new_tokens - len(self.tokens)
        kept: list[int] = []
        for token in emitted[:room]:
            kept.append(token)
            if token in self.eos:
                self.finish_reason = FinishReason.EOS
                break
        self.tokens.extend(kept)
        self._seen.update(kept)
        if self.finish_reason is None and len(self.tokens) >= self.max_new_tokens:
            self.finish_reason = FinishReason.LENGTH
        self.stats.record(len(kept), seconds, prefill=prefill, setting=None if prefill else setting_label(setting))
        yield Step(kept, seconds)

    def _report(self) -> None:
        """Tell the chooser what the steps since the last report measured, then what they score."""
        if self.chooser is None:
            return
        for observed in self._observed:
            self.chooser.observe(*observed)
        self._observed.clear()
        self._score_shadows()

    def _score_shadows(self) -> None:
        """Score the pending steps whose following tokens are known: greedy verification accepts a
        candidate's longest prefix that the answer itself continues with, plus one token."""
        assert self.chooser is not None or not self._pending
        scores = []
        while self._pending:
            start, guesses = self._pending[0]
            after = self.tokens[start : start + self._scored_span]
            if len(after) < self._scored_span and self.finish_reason is None:
                break
            self._pending.popleft()
            if not after:
                continue
            if not guesses.follower and not guesses.pooled:  # nothing to verify: a plain step for every setting
                scores.extend((setting, 1, 1) for setting in self._shadows)
                continue
            outcomes: dict[tuple[int, int, bool], tuple[int, int]] = {}  # shadows differ only in N, G and cut
            accepted: dict[tuple[int, ...], int] = {}
            for setting in self._shadows:
                kind = (setting.ngram, setting.guesses, setting.cut_to_match)
                outcome = outcomes.get(kind)
                if outcome is None:
                    found = guesses.candidates(*kind)
                    for candidate in found:
                        if candidate not in accepted:
                            accepted[candidate] = common_prefix(candidate, after)
                    longest = max((accepted[c] for c in found), default=0)
                    outcome = outcomes[kind] = (min(longest + 1, len(after)), 1 + tree_size(found))
                scores.append((setting, *outcome))
        if scores:
            self.chooser.observe_shadows(scores)

    @property
    def _past(self) -> int:
        """Tokens in the KV cache; x (the last emitted token) is never cached yet."""
        return len(self.prompt) + len(self.tokens) - 1

    def _forward(
        self, ids: torch.Tensor, positions: torch.Tensor, keep: int | torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        assert self._model_step is not None
        return self._model_step.forward(ids, positions, keep, mask)

    def _choose(self, logits: torch.Tensor) -> int:
        """The next token from a step's last kept logits row."""
        assert self._model_step is not None
        if self.policy is None:
            return self._model_step.greedy(logits)[-1]
        if self.policy.keeps_unseen_argmax:
            step = self._model_step
            known = self.policy.known_greedy(step.greedy(logits)[-1], lambda: step.ranking(logits, -1), self._seen)
            if known is not None:
                return known
        return self.policy.choose(self._prefix(()), logits[-1])

    def _prefix(self, extra: Sequence[int]) -> torch.Tensor:
        """``[1, L]`` ids of the sequence so far (x included) followed by ``extra`` guessed tokens. The text's
        new tokens are written only now: most steps' choices need no processing, and each tensor write between
        steps costs tens of microseconds."""
        length = len(self.prompt) + len(self.tokens)
        if self._ids_written < length:
            new = self.tokens[self._ids_written - len(self.prompt) :]
            self._ids[0, self._ids_written : length] = torch.tensor(new, device=self.device)
            self._ids_written = length
        if extra:
            self._ids[0, length : length + len(extra)] = torch.tensor(list(extra), device=self.device)
        return self._ids[:, : length + len(extra)]

    def _prefill(self) -> int:
        ids = torch.tensor(self.prompt, device=self.device)
        positions = torch.arange(len(self.prompt), device=self.device)
        return self._choose(self._forward(ids, positions, 1))

    def _plain_step(self, x: int) -> list[int]:
        past = self._past
        ids = torch.tensor([x], device=self.device)
        positions = torch.tensor([past], device=self.device)
        self.stats.fed_tokens += 1
        return [self._choose(self._forward(ids, positions, 1))]

    def _lookahead_step(self, x: int, cfg: LookaheadConfig) -> list[int]:
        candidates = self._candidates(x, cfg.ngram, cfg.guesses, cfg.cut_to_match)
        if not candidates and not cfg.window:  # nothing to verify: a plain step is the same step, cheaper
            return self._plain_step(x)
        tree = build_tree(candidates)
        window = self._window(cfg) if cfg.window else None
        shape = step_shape(cfg.window, len(window.levels) if window else 0, tree.parents, self._mask_dtype, self.device)
        past = self._past
        self.stats.fed_tokens += shape.size
        flat = window.rows(x) if window else [x]
        flat.extend(tree.tokens)
        ids = torch.tensor(flat, device=self.device)
        positions = shape.position_offsets + past
        logits = self._forward(ids, positions, shape.keep_rows, shape.mask_block)
        step = self._model_step
        assert step is not None
        predictions = step.greedy(logits)

        def row(c: int, m: int) -> int:
            """The kept logits row after candidate c's tokens 0..m."""
            return shape.tree_row + tree.paths[c][m]

        if self.policy is None:
            best, accepted, emitted = verify_greedy(predictions[0], candidates, lambda c, m: predictions[row(c, m)])
        else:
            policy = self.policy

            def row_scores(c: int, depth: int, tokens: int) -> torch.Tensor:
                index = 0 if c < 0 else row(c, depth)
                return policy.scores(self._prefix(candidates[c][:tokens] if c >= 0 else ()), logits[index])

            def known_choice(c: int, depth: int, tokens: int) -> int | None:
                index = 0 if c < 0 else row(c, depth)
                text = _Text(self._seen, candidates[c][:tokens] if c >= 0 else ())
                return policy.known_greedy(predictions[index], lambda: step.ranking(logits, index), text)

            known = known_choice if policy.keeps_unseen_argmax else None
            best, accepted, emitted = verify_with_policy(candidates, row_scores, policy, self.device, known)
        sources = [shape.tree_start + node for node in tree.paths[best][:accepted]] if accepted else []
        self._model_step.keep(past, shape.size, sources)
        if window is not None:
            window.update(x, predictions[1 : 1 + cfg.window], self.pool)
        return emitted

    def _candidates(self, x: int, ngram: int, guesses: int, cut: bool) -> list[tuple[int, ...]]:
        """A setting's candidates (:meth:`Guesses.candidates`) at this step."""
        return self._guesses(x).candidates(ngram, guesses, cut)

    def _guesses(self, x: int) -> Guesses:
        """What could follow x, the text's last token: looked up once a step, at the largest N and G of every
        setting (the running one and the scored ones all read it)."""
        assert self.pool is not None
        text = self._context.tokens
        length, guesses = self._looked_up
        if length == len(text):
            return guesses
        matched, follower = self._context.continuation(self._longest_guess)
        pooled = tuple(self.pool.candidates(x, self.pool.per_key)) if x in self.pool else ()
        if self._memory is not None:
            alone = not matched and not pooled  # the text offers no guess: the memory's on any context
            recalled, earlier = self._memory.continuation(
                text, self._longest_guess, shortest=1 if alone else MIN_CONTEXT
            )
            if recalled > matched:
                matched, follower = recalled, earlier if recalled >= MIN_CONTEXT else earlier[:1]
        guesses = Guesses(matched, follower, pooled)
        self._looked_up = (len(text), guesses)
        return guesses

    def _window(self, cfg: LookaheadConfig) -> JacobiWindow:
        """The Jacobi window of a (W, N); kept while other settings run, since any guesses stay valid."""
        key = (cfg.window, cfg.ngram)
        if key not in self._windows:
            self._windows[key] = JacobiWindow(cfg.window, cfg.ngram, self.prompt, self.eos, self._seed)
        return self._windows[key]

    def _add_output_ngrams(self, emitted: list[int]) -> None:
        """Index the n-grams that end in the tokens just emitted: answers often repeat themselves."""
        assert self.pool is not None
        n = self.pool.ngram
        before = self.tokens if len(self.tokens) >= n - 1 else self.prompt + self.tokens
        tail = before[len(before) - (n - 1) :] + emitted
        for i in range(len(tail) - n + 1):
            self.pool.add(tail[i : i + n])


@dataclass(frozen=True)
class _Text:
    """The tokens of the text so far and of a guess after it, without copying the text's set."""

    seen: set[int]
    guessed: Sequence[int]

    def __contains__(self, token: object) -> bool:
        return token in self.seen or token in self.guessed


def _check_attention(model: Any) -> None:
    """Lookahead passes its own 4D mask, which flash-attention kernels cannot take: say so clearly."""
    implementation = getattr(model.config, "_attn_implementation", None) or ""
    if "flash" in implementation:
        raise ValueError(
            f"This model uses attn_implementation={implementation!r}, which cannot take lookahead's tree "
            "attention mask. Load it with attn_implementation='sdpa' (or 'eager')."
        )
