"""A real model folder: tokens per step, speed-up against generate and the fastest plain decoding, memory.

Methods: transformers' ``model.generate`` (greedy), the project's plain loop, lookahead for each
setting of the paper's grid, and Auto (its chooser, revising the setting step by step as in the
app). Methods alternate their order per prompt so that machine noise hits all alike; a warm-up
round is not counted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.autotune.chooser import AutoChooser
from core.bench.gpu.budget import Deadline
from core.bench.join_parts import is_split, join_folder
from core.chat.prompt import Message, encode_messages
from core.lookahead import Decoding, LookaheadConfig
from core.runtime.timing import device_sync

PAPER_GRID = (
    LookaheadConfig(5, 3, 5),
    LookaheadConfig(7, 5, 7),
    LookaheadConfig(10, 5, 10),
    LookaheadConfig(15, 5, 15),
)
SYSTEM_PROMPT = "You are a helpful assistant."
SUITES = ("code", "chat", "math")
GENERATE, PLAIN = "generate", "plain loop"


@dataclass(frozen=True)
class Method:
    """``generate``, or the project's loop with a lookahead config (None: plain) or Auto's chooser."""

    name: str
    config: LookaheadConfig | None = None
    is_generate: bool = False
    chooser: AutoChooser | None = None


@dataclass
class MethodResult:
    name: str
    new_tokens: int = 0
    steps: int = 0
    seconds: float = 0.0
    identical: int = 0  # outputs equal to generate's
    peak_bytes: int | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0


def load_folder(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any, list[str]]:
    """The model and tokenizer of ``folder`` (joined first if it holds parts), and notes on what was done."""
    notes = []
    if is_split(folder):
        joined = join_folder(folder)
        notes.append(f"joined {len(joined)} split file(s) in {folder}")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa").to(device).eval()
    return model, tokenizer, notes


def bench_prompts(tokenizer: Any, per_suite: int) -> list[list[int]]:
    """The first ``per_suite`` prompts of the code, chat and math suites in resources/bench, encoded."""
    folder = Path(__file__).resolve().parents[3] / "resources" / "bench"
    prompts = []
    for suite in SUITES:
        data = json.loads((folder / f"{suite}.json").read_text(encoding="utf-8"))
        for prompt in data["prompts"][:per_suite]:
            messages = [Message("system", SYSTEM_PROMPT), Message("user", prompt["turns"][0])]
            prompts.append(encode_messages(tokenizer, messages))
    return prompts


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update([configured] if isinstance(configured, int) else (configured or []))
    return sorted(ids)


def standard_methods(auto: AutoChooser | None) -> list[Method]:
    methods = [Method(GENERATE, is_generate=True), Method(PLAIN)]
    methods += [Method(f"lookahead {c.label}", c) for c in PAPER_GRID]
    if auto is not None:
        first = auto.settings[0]
        methods.append(Method(f"auto (starts {first.label if first else 'plain'})", chooser=auto))
    return methods


def run_methods(
    model: Any,
    prompts: Sequence[list[int]],
    methods: Sequence[Method],
    eos: list[int],
    max_new_tokens: int,
    deadline: Deadline,
) -> tuple[list[MethodResult], int]:
    """Every method on every prompt (as long as the deadline allows); returns results and prompts done."""
    device = model.device
    results = {m.name: MethodResult(m.name) for m in methods}
    for method in methods:  # warm-up: kernels, allocator, cuBLAS handles
        _decode(model, prompts[0], method, eos, min(8, max_new_tokens))
    done = 0
    for index, ids in enumerate(prompts):
        if done and not deadline.allows(_round_estimate(results, done)):
            break
        order = list(methods[index % len(methods) :]) + list(methods[: index % len(methods)])
        reference: list[int] | None = None
        outputs: dict[str, list[int]] = {}
        for method in order:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            tokens, steps, seconds = _decode(model, ids, method, eos, max_new_tokens)
            result = results[method.name]
            result.new_tokens += len(tokens)
            result.steps += steps
            result.seconds += seconds
            if device.type == "cuda":
                result.peak_bytes = max(result.peak_bytes or 0, torch.cuda.max_memory_allocated(device))
            outputs[method.name] = tokens
            if method.is_generate:
                reference = tokens
        for name, tokens in outputs.items():
            results[name].identical += int(tokens == reference)
        done += 1
    return [results[m.name] for m in methods], done


def _round_estimate(results: dict[str, MethodResult], done: int) -> float:
    return sum(r.seconds for r in results.values()) / done


def _decode(
    model: Any, ids: list[int], method: Method, eos: list[int], max_new_tokens: int
) -> tuple[list[int], int, float]:
    """Tokens, steps (prefill included) and device-synchronised seconds of one answer."""
    device = model.device
    if method.is_generate:
        input_ids = torch.tensor([ids], device=device)
        device_sync(device)
        start = time.perf_counter()
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else None,
        )
        device_sync(device)
        seconds = time.perf_counter() - start
        tokens = out[0, len(ids) :].tolist()
        return tokens, len(tokens), seconds
    decoding = Decoding(
        model, ids, lookahead=method.config, chooser=method.chooser, max_new_tokens=max_new_tokens, eos_token_ids=eos
    )
    device_sync(device)
    start = time.perf_counter()
    list(decoding)
    device_sync(device)
    return decoding.tokens, decoding.stats.steps, time.perf_counter() - start


def summarize(results: Sequence[MethodResult], prompts_done: int) -> list[dict[str, Any]]:
    """Rows with speed-ups against generate and against the fastest plain decoding."""
    by_name = {r.name: r for r in results}
    reference = by_name[GENERATE].tokens_per_second
    fastest_plain = max(by_name[GENERATE].tokens_per_second, by_name[PLAIN].tokens_per_second)
    rows = []
    for r in results:
        rate = r.tokens_per_second
        rows.append(
            {
                "method": r.name,
                "tokens_per_second": rate,
                "tokens_per_step": r.tokens_per_step,
                "speedup_vs_generate": rate / reference if reference else None,
                "speedup_vs_fastest_plain": rate / fastest_plain if fastest_plain else None,
                "identical_to_generate": f"{r.identical}/{prompts_done}",
                "new_tokens": r.new_tokens,
                "seconds": r.seconds,
                "peak_bytes": r.peak_bytes,
            }
        )
    return rows
