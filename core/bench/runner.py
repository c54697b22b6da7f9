"""Run benchmark methods over suites on one loaded model, alternating their order, and record results.

Every method answers the same prompts; a conversation's later turns use the reference (plain
``model.generate``) answers so that all methods see identical prompts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from core.bench.suites import Suite
from core.chat.answer import eos_token_ids
from core.chat.prompt import Message, encode_messages
from core.lookahead import Decoding, LookaheadConfig, NGramPool
from core.lookahead.stats import device_sync
from core.models.loader import LoadedModel
from core.progress import CancelToken, ProgressCallback, no_progress

PROMPT_LOOKUP_TOKENS = 10
REFERENCE = "generate"
PLAIN_LOOP = "plain loop"
BENCH_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Method:
    """One way of decoding.

    Attributes:
        name: shown in reports ("generate", "plain loop", "lookahead W7 N5 G7", ...).
        kind: ``generate`` (transformers greedy), ``prompt_lookup`` (transformers prompt lookup),
            or ``loop`` (our decoder; plain when ``lookahead`` is None).
        pool: for lookahead, what seeds the n-gram pool: ``prompt`` (the whole prompt),
            ``none``, ``message`` (the last user message only), or ``conversation`` (the whole
            conversation, and the pool is kept across the conversation's turns).
    """

    name: str
    kind: str
    lookahead: LookaheadConfig | None = None
    pool: str = "prompt"


@dataclass
class RunResult:
    suite: str
    prompt: int
    turn: int
    method: str
    new_tokens: int
    steps: int
    seconds: float
    time_to_first_token: float
    identical: bool
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)


def standard_methods(configs: Sequence[tuple[str, LookaheadConfig]], peers: bool = True) -> list[Method]:
    """generate (the reference), the plain loop, each named lookahead config, and prompt lookup."""
    methods = [Method(REFERENCE, "generate")] if peers else []
    methods.append(Method(PLAIN_LOOP, "loop"))
    methods += [Method(name, "loop", config) for name, config in configs]
    if peers:
        methods.append(Method(f"prompt lookup {PROMPT_LOOKUP_TOKENS}", "prompt_lookup"))
    return methods


class BenchRunner:
    """Runs methods on one model; the first answer of each prompt from ``model.generate`` is the reference."""

    def __init__(self, loaded: LoadedModel, max_new_tokens: int = 128) -> None:
        self.loaded = loaded
        self.max_new_tokens = max_new_tokens
        self.eos = eos_token_ids(loaded)
        self._cancel = CancelToken()

    def warm_up(self, methods: Sequence[Method]) -> None:
        """Run each method once on a short prompt (first-call costs stay out of the timings)."""
        ids = encode_messages(self.loaded.tokenizer, [Message("user", "Say hello.")])
        for method in methods:
            self._run(method, ids, None, 8)

    def run(
        self,
        suites: Sequence[Suite],
        methods: Sequence[Method],
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> list[RunResult]:
        """Every method on every turn of every prompt; the method order rotates per prompt.

        ``cancel`` stops the run within one decoding step; the results finished so far are returned.
        """
        self._cancel = cancel or CancelToken()
        results: list[RunResult] = []
        total = sum(len(p.turns) for s in suites for p in s.prompts)
        done = 0
        for suite in suites:
            for index, prompt in enumerate(suite.prompts):
                messages = [Message("system", BENCH_SYSTEM_PROMPT)]
                pools: dict[str, NGramPool] = {}
                for turn, text in enumerate(prompt.turns):
                    messages.append(Message("user", text))
                    ids = encode_messages(self.loaded.tokenizer, messages)
                    reference = self._generate(ids, self.max_new_tokens)[0]
                    shift = index % len(methods)
                    for method in [*methods[shift:], *methods[:shift]]:
                        if self._cancel.cancelled:  # a run cut short by Stop is not a result
                            return results
                        pool = self._pool_for(method, pools, text)
                        tokens, stats = self._run(method, ids, pool, self.max_new_tokens)
                        if self._cancel.cancelled:
                            return results
                        results.append(
                            RunResult(suite.name, index, turn, method.name, len(tokens), stats["steps"], stats["seconds"],
                                      stats["ttft"], tokens == reference, stats["step_seconds"], stats["step_tokens"])
                        )
                    answer = self.loaded.tokenizer.decode(reference, skip_special_tokens=True)
                    messages.append(Message("assistant", answer))
                    done += 1
                    progress(f"{suite.name} {index + 1}/{len(suite.prompts)}", done / total)
        return results

    def _pool_for(self, method: Method, pools: dict[str, NGramPool], user_text: str) -> NGramPool | None:
        cfg = method.lookahead
        if cfg is None or method.pool in ("prompt", "none"):
            return None
        if method.pool == "conversation":
            return pools.setdefault(method.name, NGramPool(cfg.ngram, cfg.guesses))
        pool = NGramPool(cfg.ngram, cfg.guesses)
        pool.add_sequence(self.loaded.tokenizer(user_text, add_special_tokens=False)["input_ids"])
        return pool

    def _run(self, method: Method, ids: list[int], pool: NGramPool | None, max_new: int) -> tuple[list[int], dict[str, Any]]:
        if method.kind == "generate":
            tokens, seconds = self._generate(ids, max_new)
            return tokens, _uniform_stats(tokens, seconds)
        if method.kind == "prompt_lookup":
            tokens, seconds = self._generate(ids, max_new, prompt_lookup_num_tokens=PROMPT_LOOKUP_TOKENS)
            return tokens, _uniform_stats(tokens, seconds)
        config = method.lookahead
        if config is not None and method.pool != "prompt":
            config = LookaheadConfig(config.window, config.ngram, config.guesses, pool_from_prompt=method.pool == "conversation", seed=config.seed)
        decoding = Decoding(self.loaded.model, ids, lookahead=config, max_new_tokens=max_new, eos_token_ids=self.eos,
                            pool=pool, cancel=self._cancel)
        for _ in decoding:
            pass
        s = decoding.stats
        if pool is not None and method.pool == "conversation":
            pool.add_sequence(decoding.tokens)
        return decoding.tokens, {
            "steps": s.steps, "seconds": s.total_seconds, "ttft": s.time_to_first_token,
            "step_seconds": s.step_seconds, "step_tokens": s.step_tokens,
        }

    def _generate(self, ids: list[int], max_new: int, **extra: Any) -> tuple[list[int], float]:
        model = self.loaded.model
        input_ids = torch.tensor([ids], device=self.loaded.device)
        device_sync(self.loaded.device)
        start = time.perf_counter()
        out = model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new, do_sample=False,
            eos_token_id=self.eos, pad_token_id=self.eos[0] if self.eos else None,
            stopping_criteria=StoppingCriteriaList([_Cancelled(self._cancel)]), **extra,
        )
        device_sync(self.loaded.device)
        return out[0, len(ids):].tolist(), time.perf_counter() - start


class _Cancelled(StoppingCriteria):
    """Stops ``model.generate`` at the next token once the run is cancelled."""

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.cancel.cancelled, dtype=torch.bool, device=input_ids.device)


def _uniform_stats(tokens: list[int], seconds: float) -> dict[str, Any]:
    """generate() reports no steps: count one token per step (true for plain greedy)."""
    return {"steps": len(tokens), "seconds": seconds, "ttft": 0.0, "step_seconds": [], "step_tokens": []}

