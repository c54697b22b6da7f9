"""``python -m core.bench.gpu_check --out DIR``: prove the CUDA path on a bare GPU machine in minutes.

Needs only torch and transformers (with safetensors) and a source checkout (``PYTHONPATH=.``).
Measures step cost curves of random LLaMA models of real shapes per dtype and bitsandbytes
quantization, lookahead's exactness against plain greedy, host syncs per step, an out-of-memory
during a step, and, with ``--model DIR``, every setting of the paper's grid and Auto on a real
model. Writes ``gpu_check.json`` and ``gpu_check.md`` under DIR and prints the Markdown.
``--device cpu --tiny`` runs the same code on a tiny shape in well under a minute (CI).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers

from core.bench.gpu import sections
from core.bench.gpu.budget import Budget, Deadline
from core.bench.gpu.quantize import bitsandbytes_status
from core.bench.gpu.report import render
from core.bench.gpu.step_cost import DEFAULT_SIZES

Section = Callable[[sections.Context, Deadline], dict[str, Any]]

# (name, function, share of the budget); step cost goes last and may use whatever is left.
PLAN: tuple[tuple[str, Section, float], ...] = (
    ("exactness", sections.exactness, 0.10),
    ("syncs", sections.syncs, 0.04),
    ("out_of_memory", sections.out_of_memory, 0.05),
    ("real_model", sections.real_model, 0.30),
    ("step_cost", sections.step_cost, 1.0),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m core.bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny random shape only (the CPU run in CI)")
    parser.add_argument(
        "--model", type=Path, help="a safetensors model folder with its tokenizer (split parts are joined first)"
    )
    parser.add_argument(
        "--shapes",
        default=None,
        help="random model shapes, comma-separated: 1b,8b,13b (default: all on CUDA, 1b on the CPU)",
    )
    parser.add_argument("--sizes", default=None, help="tokens fed per step, comma-separated (default: 1,2,4,...,128)")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds for all sections (default: 420 on CUDA, 50 with --tiny)",
    )
    parser.add_argument(
        "--prompts", type=int, default=None, help="prompts per suite (code, chat, math) on the real model"
    )
    parser.add_argument("--max-new-tokens", type=int, default=None, help="answer length on the real model")
    return parser.parse_args(argv)


def context_from(args: argparse.Namespace) -> sections.Context:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "error: --device cuda, but this torch sees no CUDA GPU (CPU-only build or no driver); use --device cpu --tiny."
        )
    if args.shapes:
        shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    else:
        shapes = ["tiny"] if args.tiny else ["1b", "8b", "13b"] if device.type == "cuda" else ["1b"]
    if args.model is not None and not args.model.is_dir():
        raise SystemExit(f"error: --model {args.model} is not a folder: give the folder that `export-model` wrote.")
    unknown = [s for s in shapes if s not in sections.SHAPES]
    if unknown:
        raise SystemExit(f"error: unknown shape(s) {', '.join(unknown)}; choose from {', '.join(sections.SHAPES)}.")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(DEFAULT_SIZES)
    if sizes[0] != 1:
        sizes = [1, *sizes]  # ratios are relative to the 1-token step
    return sections.Context(
        device=device,
        tiny=args.tiny,
        shapes=shapes,
        sizes=sizes,
        context_tokens=512,
        repeats=3 if args.tiny else 5,
        model_dir=args.model,
        prompts_per_suite=args.prompts or (1 if args.tiny else 2),
        max_new_tokens=args.max_new_tokens or (16 if args.tiny else 128),
    )


def environment(device: torch.device) -> dict[str, Any]:
    _, bnb = bitsandbytes_status()
    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bitsandbytes": bnb,
        "device": str(device),
        "device_name": "CPU",
        "cuda": torch.version.cuda,
    }
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        meta.update(
            device_name=torch.cuda.get_device_name(device),
            memory_total=total,
            memory_free=free,
            capability=".".join(map(str, torch.cuda.get_device_capability(device))),
        )
    return meta


def run(ctx: sections.Context, budget: Budget, log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Every section in order; a failing section is recorded and the next one runs."""
    results: dict[str, dict[str, Any]] = {}
    for name, section, share in PLAN:
        deadline = budget.section(share)
        if budget.left() <= 0:
            results[name] = {"status": "skipped", "notes": ["time budget spent before this section"]}
            continue
        log(f"gpu_check: {name} ({budget.elapsed():.0f} s elapsed)")
        start = time.perf_counter()
        try:
            results[name] = section(ctx, deadline)
        except Exception as err:  # one broken section must not cost the rest of a rare GPU run
            results[name] = {
                "status": "error",
                "notes": [],
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(limit=8),
            }
            ctx.release()
        results[name]["seconds"] = time.perf_counter() - start
    return results


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = context_from(args)
    budget = Budget(args.time_budget or (50.0 if args.tiny else 420.0))
    torch.set_grad_enabled(False)
    report = {"meta": environment(ctx.device), "sections": run(ctx, budget, _log)}
    report["meta"].update(
        seconds=budget.elapsed(), time_budget=budget.total_seconds, argv=list(sys.argv[1:] if argv is None else argv)
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    markdown = render(report)
    (args.out / "gpu_check.md").write_text(markdown + "\n", encoding="utf-8")
    print(markdown)
    _log(f"gpu_check: wrote {args.out / 'gpu_check.json'} and {args.out / 'gpu_check.md'}")
    return 1 if any(s["status"] == "error" for s in report["sections"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
