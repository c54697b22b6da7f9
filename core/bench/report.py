"""Aggregate benchmark results per suite and method; render them as Markdown and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.bench.runner import PLAIN_LOOP, REFERENCE, RunResult



@dataclass(frozen=True)
class Row:
    """One suite x method line of the report."""

    suite: str
    method: str
    runs: int
    new_tokens: int
    seconds: float
    steps: int
    identical: int
    speedup: float | None  # against model.generate on the same suite
    speedup_vs_loop: float | None  # against the plain loop (what the app's toggle and Compare show)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0


def summarize(results: Sequence[RunResult], reference: str = REFERENCE) -> list[Row]:
    """Per suite and method: totals, tokens/s, tokens/step, identical outputs, speed-up vs ``reference``."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.suite, r.method), []).append(r)
    rows: list[Row] = []
    for (suite, method), runs in groups.items():
        new = sum(r.new_tokens for r in runs)
        seconds = sum(r.seconds for r in runs)
        rate = new / seconds if seconds > 0 else 0.0
        rows.append(Row(
            suite, method, len(runs), new, seconds, sum(r.steps for r in runs), sum(r.identical for r in runs),
            _ratio(rate, groups.get((suite, reference))), _ratio(rate, groups.get((suite, PLAIN_LOOP))),
        ))
    return rows


def _ratio(rate: float, baseline: list[RunResult] | None) -> float | None:
    if not baseline:
        return None
    seconds = sum(r.seconds for r in baseline)
    base = sum(r.new_tokens for r in baseline) / seconds if seconds > 0 else 0.0
    return rate / base if base > 0 else None


def markdown_table(rows: Sequence[Row], title: str = "") -> str:
    """The report as a Markdown table (one line per suite and method)."""
    lines = [f"### {title}", ""] if title else []
    lines += [
        "| suite | method | tok/s | vs generate | vs plain loop | tokens/step | identical | tokens |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        speed = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        vs_loop = f"{r.speedup_vs_loop:.2f}x" if r.speedup_vs_loop is not None else "-"
        lines.append(
            f"| {r.suite} | {r.method} | {r.tokens_per_second:.1f} | {speed} | {vs_loop} | {r.tokens_per_step:.2f} "
            f"| {r.identical}/{r.runs} | {r.new_tokens} |"
        )
    return "\n".join(lines) + "\n"


def report_json(rows: Sequence[Row], results: Sequence[RunResult], meta: dict[str, object]) -> dict[str, object]:
    """Everything in one JSON-ready dict: settings, summary rows and every run."""
    return {
        "meta": meta,
        "summary": [asdict(r) | {"tokens_per_second": r.tokens_per_second, "tokens_per_step": r.tokens_per_step} for r in rows],
        "runs": [asdict(r) for r in results],
    }
