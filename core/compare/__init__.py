"""Compare mode without Qt: plain vs lookahead on one prompt, summaries, export and storage."""

from core.compare.record import LOOKAHEAD, PLAIN, Comparison, RunRecord
from core.compare.run import CompareRequest, ComparisonRun, RunDone, RunStarted, RunStep, run_order
from core.compare.summary import Spread, Summary, summarize

__all__ = [
    "LOOKAHEAD",
    "PLAIN",
    "CompareRequest",
    "Comparison",
    "ComparisonRun",
    "RunDone",
    "RunRecord",
    "RunStarted",
    "RunStep",
    "Spread",
    "Summary",
    "run_order",
    "summarize",
]
