"""``lookahead-chat bench --peers llama.cpp``: our plain decoding beside llama.cpp's llama-bench, per precision."""

from __future__ import annotations

import argparse
import sys

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
from core.models import LoadOptions, ModelSource, load_model
from core.models.default_model import fetch_default_gguf
from core.paths import AppPaths


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """On the default model: ours fp32/bf16/int8/int4 against llama.cpp's F32/F16/Q8_0/Q4_1."""
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
        rows.append(PeerRow(precision, ours, theirs))
    print(
        peer_table(
            rows,
            f"SmolLM2-135M-Instruct, CPU, {threads} threads, plain decoding tg{args.max_new_tokens}, "
            f"mean of {args.repetitions} runs",
        )
    )
    return 0
