"""The built-in benchmark suites, plain loop vs lookahead, as a per-category table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.bench.report import Row, summarize
from core.bench.runner import PLAIN_LOOP, BenchRunner, standard_methods
from core.lookahead import LookaheadConfig
from core.models.loader import LoadedModel
from core.progress import CancelToken, ProgressCallback, no_progress
from core.suites import DEFAULT_SUITES, load_suite


@dataclass(frozen=True)
class SuiteLine:
    """One category: both rates, the speed-up, lookahead tokens per step, identical answers."""

    suite: str
    plain_tokens_per_second: float
    lookahead_tokens_per_second: float
    speedup: float | None
    tokens_per_step: float
    identical: int
    runs: int


def run_suites(
    loaded: LoadedModel,
    config: LookaheadConfig,
    max_new_tokens: int,
    suites: Sequence[str] = DEFAULT_SUITES,
    limit: int = 0,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> list[Row]:
    """Plain loop and lookahead ``config`` on each suite (``limit`` > 0: its first prompts only)."""
    runner = BenchRunner(loaded, max_new_tokens)
    methods = standard_methods([(f"lookahead {config.label}", config)], peers=False)
    progress("Warming up", 0.0)
    runner.warm_up(methods)
    results = runner.run([load_suite(name, limit) for name in suites], methods, progress, cancel)
    return summarize(results)


def suite_lines(rows: Sequence[Row]) -> list[SuiteLine]:
    """Pair each suite's plain and lookahead rows into one line, in suite order."""
    by_suite: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_suite.setdefault(row.suite, {})["plain" if row.method == PLAIN_LOOP else "lookahead"] = row
    lines = []
    for suite, pair in by_suite.items():
        plain, ahead = pair.get("plain"), pair.get("lookahead")
        if plain is None or ahead is None:
            continue
        lines.append(
            SuiteLine(
                suite,
                plain.tokens_per_second,
                ahead.tokens_per_second,
                ahead.speedup_vs_loop,
                ahead.tokens_per_step,
                ahead.identical,
                ahead.runs,
            )
        )
    return lines
