"""``lookahead-chat bench --peers llama.cpp``: our plain decoding beside llama.cpp's llama-bench, per precision."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers.utils import logging as transformers_logging

from app.cli.output import progress_printer
from core.bench.peers import (
    GGUF_TYPES,
    PeerRow,
    ensure_llama_cpp,
    gguf_at,
    our_model,
    our_plain_rate,
    peer_table,
    run_llama_bench,
)
from core.engine.ready import model_info
from core.models import LoadOptions, ModelSource, load_model
from core.models.default_model import fetch_default_gguf
from core.models.options import source_from_spec
from core.paths import AppPaths


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """On the default model: ours fp32/bf16/int8/int4 against llama.cpp's F32/F16/Q8_0/Q4_1. On a GGUF file
    (``--model FILE``): ours as it loads that file (with ``--quantization``) against llama.cpp on the same file."""
    if args.model and args.model != "default":
        return _same_file(args, paths)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not precisions or any(p not in GGUF_TYPES for p in precisions):
        print(
            f"error: --precisions takes {', '.join(GGUF_TYPES)}, comma-separated (got {args.precisions!r})",
            file=sys.stderr,
        )
        return 1
    transformers_logging.disable_progress_bar()
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    paths.ensure()
    ensure_llama_cpp(paths, progress=progress_printer("llama.cpp: "))
    source = fetch_default_gguf(paths, progress_printer())
    base = load_model(
        ModelSource(),
        LoadOptions(device="cpu", dtype="fp32", quantization="none"),
        paths,
        progress_printer("SmolLM2-135M-Instruct: "),
    ).model
    rows = []
    for precision in precisions:
        print(f"{precision}: ours...", file=sys.stderr)
        ours = our_plain_rate(our_model(base, precision), args.max_new_tokens, args.repetitions)
        print(f"{precision}: llama.cpp {GGUF_TYPES[precision]}...", file=sys.stderr)
        theirs = run_llama_bench(
            paths, gguf_at(paths, source, precision), threads, args.max_new_tokens, args.repetitions
        )
        rows.append(PeerRow.of(precision, ours, theirs))
    print(
        peer_table(
            rows,
            f"SmolLM2-135M-Instruct, CPU, {threads} threads, plain decoding tg{args.max_new_tokens}, "
            f"mean of {args.repetitions} runs",
        )
    )
    return 0


def _same_file(args: argparse.Namespace, paths: AppPaths) -> int:
    source = source_from_spec(args.model, paths)
    if source.kind != "gguf":
        print("error: --peers compares on a GGUF file: give --model FILE.gguf (or the default model)", file=sys.stderr)
        return 1
    transformers_logging.disable_progress_bar()
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    paths.ensure()
    ensure_llama_cpp(paths, progress=progress_printer("llama.cpp: "))
    options = LoadOptions(device="cpu", dtype=args.dtype or "auto", quantization=args.quantization or "auto")
    name = Path(source.location).name
    loaded = load_model(source, options, paths, progress_printer(f"{name}: "))
    ran = model_info(loaded).precision
    print(f"{name}: ours ({ran})...", file=sys.stderr)
    ours = our_plain_rate(loaded.prepared, args.max_new_tokens, args.repetitions)
    print(f"{name}: llama.cpp...", file=sys.stderr)
    theirs = run_llama_bench(paths, Path(source.location), threads, args.max_new_tokens, args.repetitions)
    title = f"{name}, CPU, {threads} threads, plain decoding tg{args.max_new_tokens}, mean of {args.repetitions} runs"
    print(peer_table([PeerRow(ran, "the file as stored", ours, theirs)], title))
    return 0
