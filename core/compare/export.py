"""Export a comparison: JSON (settings, summary, every run with its per-step timings) and CSV (one row per step)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from core.atomic import write_json_atomic, write_text_atomic
from core.compare.record import Comparison
from core.compare.summary import summarize

CSV_COLUMNS = (
    "comparison",
    "repeat",
    "mode",
    "position",
    "step",
    "tokens",
    "seconds",
    "elapsed_seconds",
    "total_tokens",
)


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data, with its summary (``null`` when no repeat finished)."""
    summary = summarize(comparison)
    return comparison.to_json() | {"summary": summary.to_json() if summary else None}


def comparison_csv(comparison: Comparison) -> str:
    """One row per step of every run; step 0 is the prefill."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for run in comparison.runs:
        elapsed, total = 0.0, 0
        for step, (tokens, seconds) in enumerate(zip(run.step_tokens, run.step_seconds)):
            elapsed += seconds
            total += tokens
            writer.writerow(
                [
                    comparison.id,
                    run.repeat,
                    run.mode,
                    run.position,
                    step,
                    tokens,
                    f"{seconds:.6f}",
                    f"{elapsed:.6f}",
                    total,
                ]
            )
    return out.getvalue()


def export_json(comparison: Comparison, path: Path) -> None:
    write_json_atomic(path, comparison_json(comparison))


def export_csv(comparison: Comparison, path: Path) -> None:
    write_text_atomic(path, comparison_csv(comparison))
