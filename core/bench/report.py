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
    speedup_vs_fastest_plain: float | None = None  # against the fastest plain decoding of the suite, any dtype
    fastest_plain: str = ""  # which method that was
    same_as_plain: int | None = None  # answers equal to the plain loop's in the same dtype (None: none ran)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.new_tokens / self.steps if self.steps else 0.0


def summarize(results: Sequence[RunResult], reference: str = REFERENCE, plain_loop: str = PLAIN_LOOP) -> list[Row]:
    """Per suite and method: totals, tokens/s, tokens/step, identical outputs, and speed-ups against
    ``reference``, ``plain_loop`` and the fastest plain decoding (generate or plain loop, any dtype)."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.suite, r.method), []).append(r)
    fastest: dict[str, tuple[float, str]] = {}
    for (suite, method), runs in groups.items():
        if all(r.plain for r in runs):
            rate = _rate(runs)
            if rate > fastest.get(suite, (0.0, ""))[0]:
                fastest[suite] = (rate, method)
    rows: list[Row] = []
    for (suite, method), runs in groups.items():
        rate = _rate(runs)
        base, base_name = fastest.get(suite, (0.0, ""))
        rows.append(
            Row(
                suite,
                method,
                len(runs),
                sum(r.new_tokens for r in runs),
                sum(r.seconds for r in runs),
                sum(r.steps for r in runs),
                sum(r.identical for r in runs),
                _ratio(rate, groups.get((suite, reference))),
                _ratio(rate, groups.get((suite, plain_loop))),
                rate / base if base > 0 else None,
                base_name,
                None if any(r.same_as_plain is None for r in runs) else sum(bool(r.same_as_plain) for r in runs),
            )
        )
    return rows


def _rate(runs: Sequence[RunResult]) -> float:
    seconds = sum(r.seconds for r in runs)
    return sum(r.new_tokens for r in runs) / seconds if seconds > 0 else 0.0


def _ratio(rate: float, baseline: list[RunResult] | None) -> float | None:
    base = _rate(baseline) if baseline else 0.0
    return rate / base if base > 0 else None


def markdown_table(rows: Sequence[Row], title: str = "") -> str:
    """The report as a Markdown table (one line per suite and method)."""
    lines = [f"### {title}", ""] if title else []
    lines += [
        "| suite | method | tok/s | vs fastest plain | vs generate | vs plain loop | tokens/step "
        "| identical to generate | identical to plain loop | tokens |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        same = "-" if r.same_as_plain is None else f"{r.same_as_plain}/{r.runs}"
        lines.append(
            f"| {r.suite} | {r.method} | {r.tokens_per_second:.1f} | {_x(r.speedup_vs_fastest_plain)} | {_x(r.speedup)} "
            f"| {_x(r.speedup_vs_loop)} | {r.tokens_per_step:.2f} | {r.identical}/{r.runs} | {same} | {r.new_tokens} |"
        )
    suites = {r.suite: r.fastest_plain for r in rows if r.fastest_plain}
    if suites:
        lines += [
            "",
            "Fastest plain decoding per suite: "
            + "; ".join(f"{suite}: {name}" for suite, name in suites.items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def _x(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "-"


def report_json(rows: Sequence[Row], results: Sequence[RunResult], meta: dict[str, object]) -> dict[str, object]:
    """Everything in one JSON-ready dict: settings, summary rows and every run."""
    return {
        "meta": meta,
        "summary": [
            asdict(r) | {"tokens_per_second": r.tokens_per_second, "tokens_per_step": r.tokens_per_step} for r in rows
        ],
        "runs": [asdict(r) for r in results],
    }
