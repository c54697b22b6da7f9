"""``lookahead-chat bench``: the decoding methods side by side on the suites, as a table, JSON and a chart."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from app.cli import peers
from app.cli.loading import load_from_args
from app.cli.output import one_line_errors, progress_printer
from core.bench.overhead import curve_table, profile_steps, profile_table
from core.bench.peers import ensure_llama_cpp, gguf_at, run_llama_completion, same_prompts_table
from core.bench.report import Row, markdown_table
from core.bench.runner import BENCH_SYSTEM_PROMPT
from core.bench.session import BenchOptions, BenchSession
from core.bench.variants import bench_variants
from core.chat.prompt import Message, encode_messages
from core.lookahead.config import LookaheadConfig
from core.models.default_model import MODEL_NAME, fetch_default_gguf
from core.paths import AppPaths
from core.suites import Suite, load_suite


@one_line_errors
def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Benchmark the methods side by side; print a Markdown table, write JSON and a PNG chart."""
    if args.peers:
        return peers.run(args, paths)
    try:
        suites = [load_suite(name.strip(), args.limit) for name in args.suites.split(",") if name.strip()]
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else []
        if any(d not in ("fp32", "bf16", "fp16") for d in dtypes):
            raise ValueError(f"--dtypes takes fp32, bf16 and fp16, comma-separated (got {args.dtypes!r})")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    specs = [s.strip() for s in args.configs.split(",") if s.strip()]
    fixed = []
    for spec in specs:
        try:
            if spec != "auto":
                fixed.append(_parse_config(spec))
        except ValueError as err:
            print(f"error: bad --configs entry '{spec}': give 'auto' or W:N:G such as 7:5:7 ({err}).", file=sys.stderr)
            return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    settings, loaded = load_from_args(args, paths)
    if args.overhead:
        print(profile_table(profile_steps(loaded.model)))
        print()
        print(curve_table(bench_variants(loaded, dtypes).models))  # each as Auto's calibration prepares it
        return 0
    if args.llama_cpp and loaded.name != MODEL_NAME:
        print(f"error: --llama-cpp compares on the default model ({MODEL_NAME}) only.", file=sys.stderr)
        return 1
    options = BenchOptions(
        max_new_tokens=args.max_new_tokens,
        auto="auto" in specs,
        fixed=tuple(fixed),
        dtypes=tuple(dtypes),
        repetition_penalty=args.repetition_penalty,
        memory=args.memory == "on",
        prompt_pool=args.prompt_pool,
        conversation_pool=args.conversation_pool,
        peers=not args.no_peers,
    )
    session = BenchSession(loaded, options)  # the variants as the app's calibration prepares them
    print(session.variants_line(), file=sys.stderr)
    session.calibrate()
    if session.calibration is not None:
        print(session.calibration_line(), file=sys.stderr)
    report = session.run(suites, progress_printer("bench: "))
    print(markdown_table(report.rows, report.title))
    if args.llama_cpp:
        print()
        print(_llama_cpp_on_the_prompts(paths, loaded, suites, report.rows, args.max_new_tokens))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report.as_json(), indent=1))
    _save_chart(report.rows, out / "bench.png")
    print(f"Wrote {out / 'bench.json'} and {out / 'bench.png'}.", file=sys.stderr)
    return 0


def _llama_cpp_on_the_prompts(
    paths: AppPaths, loaded: Any, suites: list[Suite], rows: list[Row], max_new_tokens: int
) -> str:
    """llama.cpp's greedy Q8_0 answers to each prompt's first turn (the chat template's text, the bench's
    system prompt), timed by llama-completion, as a table beside Auto's and the fastest plain decoding's rates."""
    ensure_llama_cpp(paths, progress=progress_printer("llama.cpp: "))
    gguf = gguf_at(paths, fetch_default_gguf(paths, progress_printer()), "int8")
    threads = torch.get_num_threads()
    theirs: dict[str, tuple[int, float]] = {}
    for suite in suites:
        tokens, seconds = 0, 0.0
        for prompt in suite.prompts:
            messages = [Message("system", BENCH_SYSTEM_PROMPT), Message("user", prompt.turns[0])]
            text = loaded.tokenizer.decode(encode_messages(loaded.tokenizer, messages))
            made, took = run_llama_completion(paths, gguf, threads, text, max_new_tokens)
            tokens, seconds = tokens + made, seconds + took
        theirs[suite.name] = (tokens, seconds)
    return same_prompts_table(
        rows,
        theirs,
        f"llama.cpp on the same prompts: llama-completion, Q8_0, greedy, {threads} threads, first turns, "
        f"at most {max_new_tokens} tokens",
    )


def _parse_config(spec: str) -> LookaheadConfig:
    """``W:N:G`` or ``W:N:G:cut`` as a validated config."""
    parts = spec.split(":")
    cut = parts[3:] == ["cut"]
    if len(parts) != (4 if cut else 3):
        raise ValueError("three numbers are needed, then optionally 'cut'")
    window, ngram, guesses = (int(v) for v in parts[:3])
    return LookaheadConfig(window, ngram, guesses, cut_to_match=cut)


def _save_chart(rows: Any, path: Path) -> None:
    """Draw the per-suite chart with the app's QPainter charts (offscreen)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.compare.charts import save_bench_chart  # Qt, only to draw the chart: after the platform is set

    save_bench_chart(rows, path)
