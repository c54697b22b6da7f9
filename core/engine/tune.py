"""``tune``: Auto's deeper search, every setting's tokens per step measured on this model.

Auto starts from priors measured on the default model; ``tune`` decodes the benchmark suites'
prompts with each setting of Auto's grid and stores what it measured with the calibration, so that
Auto's predictions rest on this model's own figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.autotune.calibration import Calibration
from core.autotune.predict import Estimate, grid
from core.autotune.prepare import AutoTuning
from core.chat.prompt import Message, encode_messages
from core.lookahead.config import LookaheadConfig
from core.lookahead.decoder import Decoding
from core.models.loader import LoadedModel
from core.progress import ProgressCallback, no_progress
from core.suites import DEFAULT_SUITES, load_suite


def tune(
    loaded: LoadedModel,
    auto: AutoTuning,
    prompts_per_suite: int = 4,
    max_new_tokens: int = 96,
    progress: ProgressCallback = no_progress,
    settings: Sequence[LookaheadConfig] | None = None,
) -> Calibration:
    """Measure each setting's tokens per step on the suites; store them and redo Auto's predictions."""
    if auto.calibration is None:
        raise ValueError("Auto has not measured this machine yet: load the model without cancelling first.")
    settings = list(settings) if settings is not None else grid(loaded.device.type)
    prompts = [
        encode_messages(loaded.tokenizer, [Message("user", p.turns[0])])
        for name in DEFAULT_SUITES
        for p in load_suite(name, prompts_per_suite).prompts
    ]
    measured: dict[str, tuple[float, float]] = {}
    for i, setting in enumerate(settings):
        progress(f"Measuring {setting.label}", i / len(settings))
        new = steps = fed = 0
        for ids in prompts:
            decoding = Decoding(
                loaded.prepared,
                ids,
                lookahead=setting,
                max_new_tokens=max_new_tokens,
                eos_token_ids=loaded.eos_token_ids,
            )
            for _ in decoding:
                pass
            new += decoding.stats.new_tokens - 1  # the prefill's token is the same for every method
            steps += decoding.stats.steps - 1
            fed += decoding.stats.fed_tokens
        measured[setting.label] = (new / max(steps, 1), fed / max(steps, 1))
    auto.relearn(measured)
    progress("Tuned", 1.0)
    assert auto.calibration is not None
    return auto.calibration


def estimate_table(estimates: Sequence[Estimate]) -> str:
    """Markdown table of Auto's predictions, best first."""
    lines = ["| setting | tokens/step | tokens fed/step | expected speed-up |", "|---|---:|---:|---:|"]
    lines += [f"| {e.label} | {e.tokens_per_step:.2f} | {e.fed_tokens:.1f} | {e.speedup:.2f}x |" for e in estimates]
    return "\n".join(lines)
