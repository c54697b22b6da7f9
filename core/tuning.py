"""Choosing lookahead parameters: fixed W, N, G, or 'Auto' from a tuned per-device profile.

``tune`` measures, for the loaded model, dtype and device, (1) the step cost as a function of
the number of tokens fed in one forward pass and (2) the tokens per step that each (W, N, G)
achieves on the benchmark suites; it picks the setting with the highest expected tokens/s,
``tokens_per_step / cost(mean step size)``, and stores the profile in the data dir.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from core.atomic import write_json_atomic
from core.bench.suites import DEFAULT_SUITES, load_suite
from core.chat.answer import eos_token_ids
from core.chat.prompt import Message, encode_messages
from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding
from core.lookahead.defaults import default_lookahead
from core.lookahead.stats import device_sync
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import ProgressCallback, no_progress
from core.settings import LookaheadSettings

log = logging.getLogger(__name__)

STEP_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
CPU_GRID = [(2, 3, 2), (3, 3, 3), (4, 3, 4), (3, 4, 3), (4, 4, 4), (5, 4, 5), (6, 4, 6), (4, 5, 4), (5, 5, 5), (7, 5, 7)]
CUDA_GRID = [*CPU_GRID, (10, 5, 10), (15, 5, 15), (10, 6, 10), (15, 6, 15), (20, 5, 20)]


@dataclass(frozen=True)
class Candidate:
    """One (W, N, G) with its measured tokens per step and mean step size."""

    window: int
    ngram: int
    guesses: int
    tokens_per_step: float
    mean_step_size: float
    expected_speedup: float  # over plain decoding, from the step-cost curve

    @property
    def config(self) -> LookaheadConfig:
        return LookaheadConfig(self.window, self.ngram, self.guesses)


@dataclass(frozen=True)
class Profile:
    """A tuned profile for one (device, model, dtype)."""

    device: str
    model: str
    dtype: str
    step_sizes: list[int]
    step_seconds: list[float]
    candidates: list[Candidate]
    best: Candidate

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Profile":
        candidates = [Candidate(**c) for c in data["candidates"]]
        return cls(data["device"], data["model"], data["dtype"], list(data["step_sizes"]), list(data["step_seconds"]),
                   candidates, Candidate(**data["best"]))


def profile_path(paths: AppPaths, loaded: LoadedModel) -> Path:
    """Where the profile of this device, model and dtype lives."""
    key = f"{loaded.device_info.name}-{loaded.name}-{_dtype_name(loaded)}-{loaded.quantization}"
    return paths.data_dir / "profiles" / (re.sub(r"[^A-Za-z0-9._-]+", "_", key) + ".json")


def load_profile(paths: AppPaths, loaded: LoadedModel) -> Profile | None:
    path = profile_path(paths, loaded)
    if not path.is_file():
        return None
    try:
        return Profile.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring unreadable tuning profile %s: %s", path, err)
        return None


def lookahead_for(settings: LookaheadSettings, loaded: LoadedModel, paths: AppPaths) -> LookaheadConfig:
    """Fixed settings as given; 'Auto' uses the tuned profile, or the measured defaults without one."""
    if not settings.auto:
        return settings.fixed
    profile = load_profile(paths, loaded)
    if profile is not None:
        return profile.best.config
    return default_lookahead(loaded.device, loaded.parameters)


def measure_step_cost(loaded: LoadedModel, sizes: Sequence[int] = STEP_SIZES, context: int = 256, repeats: int = 5) -> list[float]:
    """Median seconds of one forward pass feeding ``size`` new tokens after ``context`` cached ones.

    Sizes are interleaved within each repeat so that machine noise hits all of them alike.
    """
    from transformers import DynamicCache

    model, device = loaded.model, loaded.device
    dtype = model.get_input_embeddings().weight.dtype
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(10, vocab, (1, context), generator=generator).to(device)
    cache = DynamicCache(config=model.config)
    times: dict[int, list[float]] = {s: [] for s in sizes}
    with torch.inference_mode():
        model(input_ids=prefix, cache=cache, use_cache=True, logits_to_keep=1)
        for _ in range(repeats + 1):  # the first round warms up and is dropped
            for size in sizes:
                ids = torch.randint(10, vocab, (1, size), generator=generator).to(device)
                block = torch.full((size, size), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
                mask = torch.cat([block.new_zeros(size, context), block], dim=1)[None, None]
                positions = torch.arange(context, context + size, device=device)[None]
                device_sync(device)
                start = time.perf_counter()
                model(input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True,
                      logits_to_keep=torch.arange(min(size, 1 + size // 2), device=device))
                device_sync(device)
                times[size].append(time.perf_counter() - start)
                cache.crop(-size)
    return [statistics.median(times[s][1:]) for s in sizes]


def interpolate(sizes: Sequence[int], seconds: Sequence[float], size: float) -> float:
    """Step cost at ``size`` tokens, linear between measured sizes (and beyond the last two)."""
    if size <= sizes[0]:
        return seconds[0]
    for (s0, t0), (s1, t1) in zip(zip(sizes, seconds), zip(sizes[1:], seconds[1:])):
        if size <= s1:
            return t0 + (t1 - t0) * (size - s0) / (s1 - s0)
    (s0, t0), (s1, t1) = (sizes[-2], seconds[-2]), (sizes[-1], seconds[-1])
    return t1 + (t1 - t0) * (size - s1) / (s1 - s0)


def tune(
    loaded: LoadedModel,
    paths: AppPaths,
    prompts_per_suite: int = 4,
    max_new_tokens: int = 96,
    progress: ProgressCallback = no_progress,
) -> Profile:
    """Measure the step cost and each grid setting's acceptance; store and return the profile."""
    progress("Measuring the step cost", 0.0)
    seconds = measure_step_cost(loaded)
    grid = CUDA_GRID if loaded.device.type == "cuda" else CPU_GRID
    prompts = [
        encode_messages(loaded.tokenizer, [Message("user", p.turns[0])])
        for name in DEFAULT_SUITES for p in load_suite(name, prompts_per_suite).prompts
    ]
    eos = eos_token_ids(loaded)
    candidates: list[Candidate] = []
    for i, (w, n, g) in enumerate(grid):
        progress(f"Measuring W{w} N{n} G{g}", 0.1 + 0.9 * i / len(grid))
        new = steps = fed = 0
        for ids in prompts:
            decoding = Decoding(loaded.model, ids, lookahead=LookaheadConfig(w, n, g), max_new_tokens=max_new_tokens, eos_token_ids=eos)
            for _ in decoding:
                pass
            new += decoding.stats.new_tokens - 1  # the prefill's token is the same for every method
            steps += decoding.stats.steps - 1
            fed += decoding.stats.fed_tokens
        tps, size = new / max(steps, 1), fed / max(steps, 1)
        speedup = tps * seconds[0] / interpolate(STEP_SIZES, seconds, size)
        candidates.append(Candidate(w, n, g, tps, size, speedup))
    best = max(candidates, key=lambda c: c.expected_speedup)
    profile = Profile(loaded.device_info.name, loaded.name, _dtype_name(loaded), list(STEP_SIZES), seconds, candidates, best)
    write_json_atomic(profile_path(paths, loaded), profile.to_json())
    progress("Tuned", 1.0)
    return profile


def _dtype_name(loaded: LoadedModel) -> str:
    return str(loaded.dtype).removeprefix("torch.")
