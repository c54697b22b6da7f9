"""The GPU check's budget and its report of the CUDA-only sections, which the CPU run cannot produce."""

from __future__ import annotations

import pytest
import torch

from core.bench.gpu.auto_choice import AutoOutcome
from core.bench.gpu.budget import Budget
from core.bench.gpu.oom import OomResult
from core.bench.gpu.real_model import GENERATE, PLAIN, MethodResult, summarize
from core.bench.gpu.report import render
from core.bench.gpu.sections import Context
from core.bench.gpu.syncs import SyncReport, SyncSite
from core.bench.gpu_check import PLAN, main, run
from core.lookahead import LookaheadConfig


def test_a_spent_budget_skips_every_section_and_builds_nothing() -> None:
    ctx = Context(torch.device("cpu"), True, ["tiny"], [1, 2], 16, 1, None, 1, 4)
    results = run(ctx, Budget(0.0), lambda line: None)
    assert list(results) == [name for name, _, _ in PLAN]
    assert all(r["status"] == "skipped" for r in results.values())
    assert ctx._model is None


def test_section_deadlines_share_the_budget() -> None:
    budget = Budget(100.0)
    assert budget.section(0.1).allows(5.0) and not budget.section(0.1).allows(20.0)
    assert not Budget(10.0).section(5.0).allows(20.0)  # never past the end of the whole budget


def _cuda_report() -> dict:
    auto = AutoOutcome(
        True, "auto picks W15 N5 G15 after 12.0 s of calibration", LookaheadConfig(15, 5, 15), 12.0, {"grid": []}
    )
    results = [
        MethodResult(GENERATE, 256, 256, 4.0, 2, 2 << 30),
        MethodResult(PLAIN, 256, 256, 3.2, 2, 2 << 30),
        MethodResult("lookahead W15 N5 G15", 256, 120, 2.0, 2, 3 << 30),
        MethodResult("auto (W15 N5 G15)", 256, 120, 2.1, 2, 3 << 30),
    ]
    oom = OomResult(
        "OutOfMemoryError",
        True,
        "CUDA out of memory. Tried to allocate 20.00 MiB",
        3,
        14,
        True,
        2 << 30,
        2 << 30,
        True,
        True,
    )
    syncs = SyncReport(
        "W15 N5 G15",
        8,
        True,
        [
            SyncSite("implicit", "core/lookahead/decoder.py:183", "predictions = logits.argmax(dim=-1).tolist()", 1.0),
            SyncSite(
                "synchronize",
                "core/lookahead/stats.py:16 device_sync <- core/lookahead/stats.py:97 start",
                "torch.cuda.synchronize(device)",
                2.0,
            ),
        ],
    )
    return {
        "meta": {
            "device_name": "NVIDIA H200",
            "torch": "2.13.0",
            "transformers": "5.24.0",
            "bitsandbytes": "bitsandbytes 0.50.2",
            "seconds": 400.0,
            "time_budget": 420.0,
        },
        "sections": {
            "real_model": {
                "status": "ok",
                "notes": [auto.note],
                "model": "build/gpu-model",
                "dtype": "float16",
                "prompts_done": 2,
                "max_new_tokens": 128,
                "auto": auto.as_dict(),
                "rows": summarize(results, 2),
            },
            "out_of_memory": {"status": "ok", "notes": [], **oom.as_dict()},
            "syncs": {"status": "ok", "notes": [], "rows": [syncs.as_dict()]},
        },
    }


def test_the_report_answers_the_cuda_questions() -> None:
    text = render(_cuda_report())
    assert text.startswith("# GPU check: NVIDIA H200")
    assert (
        "- Real model: fastest is lookahead W15 N5 G15 at 1.60x of the fastest plain decoding (2.00x of generate)."
        in text
    )
    assert "- Auto: auto picks W15 N5 G15 after 12.0 s of calibration; 1.52x of the fastest plain decoding." in text
    assert (
        "raised OutOfMemoryError (the app's worker catches it: True); KV cache dropped: True; memory returned: True; "
        "decoding again works: True" in text
    )
    assert "- Host syncs per steady-state step, W15 N5 G15: 3.0." in text
    assert (
        "| W15 N5 G15 | implicit | 1.00 | core/lookahead/decoder.py:183 | `predictions = logits.argmax(dim=-1).tolist()` |"
        in text
    )
    assert "| auto (W15 N5 G15) | 121.9 | 2.13 | 1.90x | 1.52x | 2/2 | 3,072 |" in text


def test_a_missing_model_folder_is_refused_before_anything_runs(tmp_path) -> None:
    with pytest.raises(SystemExit, match="is not a folder"):
        main(["--out", str(tmp_path / "out"), "--device", "cpu", "--tiny", "--model", str(tmp_path / "missing")])
    assert not (tmp_path / "out").exists()
