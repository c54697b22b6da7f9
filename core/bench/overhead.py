"""How much of a decoding step is spent outside the model's forward pass (Python, masks, cache moves)."""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from dataclasses import dataclass

from core.lookahead import Decoding, LookaheadConfig
from core.lookahead.stats import device_sync
from core.models.loader import LoadedModel


@dataclass(frozen=True)
class Overhead:
    steps: int
    step_seconds: float  # all decoding steps after the prefill
    forward_seconds: float  # inside model.forward during those steps
    profile_top: str  # cProfile's top entries by own time, for a second run

    @property
    def outside_fraction(self) -> float:
        return 1.0 - self.forward_seconds / self.step_seconds if self.step_seconds else 0.0


def measure_overhead(loaded: LoadedModel, prompt_ids: list[int], config: LookaheadConfig | None, max_new_tokens: int = 128) -> Overhead:
    """Time the forward passes with hooks on the model, against the steps' own (synchronised) times."""
    model, device = loaded.model, loaded.device
    spans: list[float] = []
    started: list[float] = []

    def before(*_: object, **__: object) -> None:
        device_sync(device)
        started.append(time.perf_counter())

    def after(*_: object, **__: object) -> None:
        device_sync(device)
        spans.append(time.perf_counter() - started.pop())

    pre = model.register_forward_pre_hook(before, with_kwargs=True)
    post = model.register_forward_hook(after, with_kwargs=True)
    try:
        decoding = Decoding(model, prompt_ids, lookahead=config, max_new_tokens=max_new_tokens)
        list(decoding)
    finally:
        pre.remove()
        post.remove()
    step_seconds = sum(decoding.stats.step_seconds[1:])
    forward_seconds = sum(spans[1:])  # the first forward is the prefill
    profiler = cProfile.Profile()
    profiler.enable()
    list(Decoding(model, prompt_ids, lookahead=config, max_new_tokens=max_new_tokens))
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    return Overhead(decoding.stats.steps - 1, step_seconds, forward_seconds, text.getvalue())
