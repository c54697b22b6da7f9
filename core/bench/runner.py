"""Run benchmark methods over suites on one model (in one or more dtypes), alternating their order.

Every method answers the same prompts and is timed the same way: wall clock around the whole
call, after a device sync, warm-up excluded; steps are counted as forward passes, for
``model.generate`` and prompt lookup too. A conversation's later turns use the reference (plain
``model.generate`` in the first dtype) answers so that all methods see identical prompts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from core.autotune.chooser import AutoChooser
from core.chat.prompt import Message, encode_messages
from core.lookahead import AnswerMemory, Decoding, LookaheadConfig, NGramPool
from core.lookahead.sampling import SamplingConfig, TokenPolicy
from core.models.loader import LoadedModel
from core.progress import CancelToken, ProgressCallback, no_progress
from core.runtime.prepared import PreparedModel
from core.runtime.timing import device_sync
from core.suites import Suite

PROMPT_LOOKUP_TOKENS = 10
REFERENCE = "generate"
PLAIN_LOOP = "plain loop"
AUTO = "auto"
BENCH_SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Method:
    """One way of decoding.

    Attributes:
        name: shown in reports ("generate", "plain loop", "lookahead W7 N5 G7", "auto", ...).
        kind: ``generate`` (transformers greedy), ``prompt_lookup`` (transformers prompt lookup),
            ``loop`` (our decoder; plain when ``lookahead`` is None) or ``auto`` (our decoder with
            Auto's chooser, kept across the run's answers as the app keeps it).
        pool: for lookahead, what seeds the n-gram pool: ``prompt`` (the whole prompt),
            ``none``, ``message`` (the last user message only), or ``conversation`` (the whole
            conversation, and the pool is kept across the conversation's turns).
        dtype: which of the runner's models runs it (``None``: the first).
    """

    name: str
    kind: str
    lookahead: LookaheadConfig | None = None
    pool: str = "prompt"
    dtype: str | None = None

    @property
    def plain(self) -> bool:
        """A plain decoding (one token per step): a candidate for the 'fastest plain' baseline."""
        return self.kind == "generate" or (self.kind == "loop" and self.lookahead is None)


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
    plain: bool = False
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    settings: dict[str, int] = field(default_factory=dict)  # tokens per setting (auto)
    same_as_plain: bool | None = None  # the plain loop's answer in the same dtype (None: no plain loop ran there)


def standard_methods(configs: Sequence[tuple[str, LookaheadConfig]], peers: bool = True) -> list[Method]:
    """generate (the reference), the plain loop, each named lookahead config, and prompt lookup."""
    methods = [Method(REFERENCE, "generate")] if peers else []
    methods.append(Method(PLAIN_LOOP, "loop"))
    methods += [Method(name, "loop", config) for name, config in configs]
    if peers:
        methods.append(Method(f"prompt lookup {PROMPT_LOOKUP_TOKENS}", "prompt_lookup"))
    return methods


def dtype_name(model: PreparedModel) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(model.dtype, "other")


class BenchRunner:
    """Runs methods on one model; the first answer of each prompt from ``model.generate`` is the reference.

    Args:
        loaded: the model (its dtype is the first one).
        max_new_tokens: answer length.
        repetition_penalty: applied by every method (1.1 is the chat default); 1.0 is plain greedy.
        chooser: Auto's chooser for ``auto`` methods; it runs on the model variant its calibration chose.
        models: the variants to run methods on, by name (``fp32``, ``bf16``, ``int8``: int8 weights, as Auto
            may pick on the CPU), each as prepared for this machine; the first is the reference's. Default:
            the loaded model alone.
        memory: lookahead also guesses from the answers to the run's earlier prompts, as the app does from
            the model's earlier answers (every method of a prompt sees the same ones: the reference answers).
    """

    def __init__(
        self,
        loaded: LoadedModel,
        max_new_tokens: int = 128,
        repetition_penalty: float = 1.0,
        chooser: AutoChooser | None = None,
        models: dict[str, PreparedModel] | None = None,
        memory: bool = True,
    ) -> None:
        self.loaded = loaded
        self.max_new_tokens = max_new_tokens
        self.eos = loaded.eos_token_ids
        self.repetition_penalty = repetition_penalty
        self.chooser = chooser
        self.models = dict(models) if models else {dtype_name(loaded.prepared): loaded.prepared}
        self.memory = AnswerMemory() if memory else None
        self._cancel = CancelToken()

    @property
    def first_dtype(self) -> str:
        return next(iter(self.models))

    def warm_up(self, methods: Sequence[Method]) -> None:
        """Run each method once on a short prompt (first-call costs stay out of the timings)."""
        ids = encode_messages(self.loaded.tokenizer, [Message("user", "Say hello.")])
        chooser = self.chooser
        self.chooser = copy.deepcopy(chooser)  # warm-up steps must not teach the real chooser
        try:
            for method in methods:
                self._run(method, ids, None, 8)
        finally:
            self.chooser = chooser

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
        by_name = {method.name: method for method in methods}
        plain_loops = {self._dtype_of(m): m.name for m in methods if m.kind == "loop" and m.lookahead is None}
        done = 0
        for suite in suites:
            for index, prompt in enumerate(suite.prompts):
                messages = [Message("system", BENCH_SYSTEM_PROMPT)]
                pools: dict[str, NGramPool] = {}
                for turn, text in enumerate(prompt.turns):
                    messages.append(Message("user", text))
                    ids = encode_messages(self.loaded.tokenizer, messages)
                    # the references first: an untimed generate between two timed methods would favour the one after it
                    references: dict[str, list[int]] = {}
                    for dtype in dict.fromkeys(self._dtype_of(method) for method in methods):
                        references[dtype] = self._generate(self.models[dtype], ids, self.max_new_tokens)[0]
                        if self._cancel.cancelled:  # a run cut short by Stop is not a result
                            return results
                    shift = index % len(methods)
                    answers: dict[str, list[int]] = {}
                    for method in [*methods[shift:], *methods[:shift]]:
                        if self._cancel.cancelled:
                            return results
                        dtype = self._dtype_of(method)
                        pool = self._pool_for(method, pools, text)
                        tokens, stats = self._run(method, ids, pool, self.max_new_tokens)
                        if self._cancel.cancelled:
                            return results
                        answers[method.name] = tokens
                        results.append(
                            RunResult(
                                suite.name,
                                index,
                                turn,
                                method.name,
                                len(tokens),
                                stats["steps"],
                                stats["seconds"],
                                stats["ttft"],
                                tokens == references[dtype],
                                method.plain,
                                stats["step_seconds"],
                                stats["step_tokens"],
                                stats.get("settings", {}),
                            )
                        )
                    for result in results[-len(methods) :]:  # exactness: each against plain decoding as it runs here
                        plain = plain_loops.get(self._dtype_of(by_name[result.method]))
                        result.same_as_plain = None if plain is None else answers[result.method] == answers[plain]
                    first = (
                        references.get(self.first_dtype)
                        or self._generate(self.models[self.first_dtype], ids, self.max_new_tokens)[0]
                    )
                    messages.append(Message("assistant", self.loaded.tokenizer.decode(first, skip_special_tokens=True)))
                    if self.memory is not None:
                        self.memory.add(first)
                    done += 1
                    progress(f"{suite.name} {index + 1}/{len(suite.prompts)}", done / total)
        return results

    def _dtype_of(self, method: Method) -> str:
        if method.kind == AUTO and self.chooser is not None:
            return self.chooser.calibration.variant
        return method.dtype or self.first_dtype

    def _pool_for(self, method: Method, pools: dict[str, NGramPool], user_text: str) -> NGramPool | None:
        cfg = method.lookahead
        if cfg is None or method.pool in ("prompt", "none"):
            return None
        if method.pool == "conversation":
            return pools.setdefault(method.name, NGramPool(cfg.ngram, cfg.guesses))
        pool = NGramPool(cfg.ngram, cfg.guesses)
        pool.add_sequence(self.loaded.tokenizer(user_text, add_special_tokens=False)["input_ids"])
        return pool

    def _run(
        self, method: Method, ids: list[int], pool: NGramPool | None, max_new: int
    ) -> tuple[list[int], dict[str, Any]]:
        model = self.models[self._dtype_of(method)]
        if method.kind in ("generate", "prompt_lookup"):
            extra = {"prompt_lookup_num_tokens": PROMPT_LOOKUP_TOKENS} if method.kind == "prompt_lookup" else {}
            forwards = [0]
            hook = model.model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
            try:  # the hook is removed again: the runner also serves the app's own model (Compare suites)
                tokens, seconds = self._generate(model, ids, max_new, **extra)
            finally:
                hook.remove()
            return tokens, {
                "steps": forwards[0],
                "seconds": seconds,
                "ttft": 0.0,
                "step_seconds": [],
                "step_tokens": [],
            }
        config = method.lookahead
        if config is not None and method.pool != "prompt":
            config = LookaheadConfig(
                config.window,
                config.ngram,
                config.guesses,
                pool_from_prompt=method.pool == "conversation",
                seed=config.seed,
            )
        chooser = self.chooser if method.kind == AUTO else None
        if method.kind == AUTO and chooser is None:
            raise ValueError("an 'auto' method needs the runner's chooser (calibrate first)")
        decoding = Decoding(
            model,
            ids,
            lookahead=config,
            chooser=chooser,
            max_new_tokens=max_new,
            eos_token_ids=self.eos,
            pool=pool,
            memory=self.memory,
            cancel=self._cancel,
            policy=self._policy(),
        )
        device_sync(self.loaded.device)
        start = time.perf_counter()
        for _ in decoding:
            pass
        device_sync(self.loaded.device)
        seconds = time.perf_counter() - start
        s = decoding.stats
        if pool is not None and method.pool == "conversation":
            pool.add_sequence(decoding.tokens)
        return decoding.tokens, {
            "steps": s.steps,
            "seconds": seconds,
            "ttft": s.time_to_first_token,
            "step_seconds": s.step_seconds,
            "step_tokens": s.step_tokens,
            "settings": dict(s.setting_tokens),
        }

    def _policy(self) -> TokenPolicy | None:
        if self.repetition_penalty == 1.0:
            return None
        return TokenPolicy(SamplingConfig(repetition_penalty=self.repetition_penalty).processors(), do_sample=False)

    def _generate(self, model: PreparedModel, ids: list[int], max_new: int, **extra: Any) -> tuple[list[int], float]:
        input_ids = torch.tensor([ids], device=self.loaded.device)
        if self.repetition_penalty != 1.0:
            extra["repetition_penalty"] = self.repetition_penalty
        device_sync(self.loaded.device)
        start = time.perf_counter()
        out = model.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=self.eos,
            pad_token_id=self.eos[0] if self.eos else None,
            stopping_criteria=StoppingCriteriaList([_Cancelled(self._cancel)]),
            **extra,
        )
        device_sync(self.loaded.device)
        return out[0, len(ids) :].tolist(), time.perf_counter() - start


class _Cancelled(StoppingCriteria):
    """Stops ``model.generate`` at the next token once the run is cancelled."""

    def __init__(self, cancel: CancelToken) -> None:
        self.cancel = cancel

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.cancel.cancelled, dtype=torch.bool, device=input_ids.device)
