"""How an answer decodes: plain, fixed lookahead, or Auto; and ``tune``, Auto's deeper search.

Auto (mode ``auto``) runs the model's :class:`~core.lookahead.auto.AutoChooser`, made by the
calibration (:mod:`core.calibration`) after the model loads. ``tune`` measures the tokens per step
of every setting of Auto's grid on the benchmark suites, for this model, and stores them with the
calibration: Auto's predictions then rest on measurements instead of the built-in priors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.bench.suites import DEFAULT_SUITES, load_suite
from core.calibration import save_tokens_per_step
from core.chat.answer import eos_token_ids
from core.chat.prompt import Message, encode_messages
from core.lookahead.auto import AutoChooser, Calibration, Estimate, grid
from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding
from core.lookahead.defaults import default_lookahead
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import ProgressCallback, no_progress
from core.settings import LookaheadSettings


@dataclass(frozen=True)
class DecodingPlan:
    """What an answer runs: a fixed setting (``None`` = plain), or Auto's chooser."""

    lookahead: LookaheadConfig | None
    chooser: AutoChooser | None = None

    @property
    def label(self) -> str:
        if self.chooser is not None:
            return "auto"
        return f"lookahead {self.lookahead.label}" if self.lookahead else "plain"

    @property
    def pool_shape(self) -> tuple[int, int] | None:
        """(N, G) of the n-gram pool the answer needs, or ``None`` if it runs plain only."""
        settings = [s for s in (self.chooser.settings if self.chooser else [self.lookahead]) if s is not None]
        if not settings:
            return None
        return max(s.ngram for s in settings), max(s.guesses for s in settings)


def decoding_plan(mode: str, settings: LookaheadSettings, loaded: LoadedModel) -> DecodingPlan:
    """The plan for ``mode``: Auto without a calibration (cancelled) decodes plain."""
    if mode == "plain":
        return DecodingPlan(None)
    if mode == "auto":
        return DecodingPlan(None, loaded.chooser) if loaded.chooser is not None else DecodingPlan(None)
    if not settings.auto:
        return DecodingPlan(settings.fixed)
    if loaded.calibration is not None:
        return DecodingPlan(loaded.calibration.best_lookahead)
    return DecodingPlan(default_lookahead(loaded.device, loaded.parameters))


def tune(
    loaded: LoadedModel,
    paths: AppPaths,
    prompts_per_suite: int = 4,
    max_new_tokens: int = 96,
    progress: ProgressCallback = no_progress,
    settings: Sequence[LookaheadConfig] | None = None,
) -> Calibration:
    """Measure each setting's tokens per step on the suites; store them and redo Auto's predictions."""
    if loaded.calibration is None:
        raise ValueError("Auto has not measured this machine yet: load the model without cancelling first.")
    settings = list(settings) if settings is not None else grid(loaded.device.type)
    prompts = [
        encode_messages(loaded.tokenizer, [Message("user", p.turns[0])])
        for name in DEFAULT_SUITES for p in load_suite(name, prompts_per_suite).prompts
    ]
    eos = eos_token_ids(loaded)
    measured: dict[str, tuple[float, float]] = {}
    for i, setting in enumerate(settings):
        progress(f"Measuring {setting.label}", i / len(settings))
        new = steps = fed = 0
        for ids in prompts:
            decoding = Decoding(loaded.model, ids, lookahead=setting, max_new_tokens=max_new_tokens, eos_token_ids=eos)
            for _ in decoding:
                pass
            new += decoding.stats.new_tokens - 1  # the prefill's token is the same for every method
            steps += decoding.stats.steps - 1
            fed += decoding.stats.fed_tokens
        measured[setting.label] = (new / max(steps, 1), fed / max(steps, 1))
    save_tokens_per_step(loaded, paths, measured)
    loaded.calibration = loaded.calibration.with_learned(measured)
    loaded.chooser = AutoChooser(loaded.calibration)
    progress("Tuned", 1.0)
    return loaded.calibration


def estimate_table(estimates: Sequence[Estimate]) -> str:
    """Markdown table of Auto's predictions, best first."""
    lines = ["| setting | tokens/step | tokens fed/step | expected speed-up |", "|---|---:|---:|---:|"]
    lines += [f"| {e.label} | {e.tokens_per_step:.2f} | {e.fed_tokens:.1f} | {e.speedup:.2f}x |" for e in estimates]
    return "\n".join(lines)
