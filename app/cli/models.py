"""``lookahead-chat models``, ``fetch-default``, ``export-model`` and ``quality``: the models themselves."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from app.cli.loading import command_settings, load_named_model
from app.cli.output import one_line_errors, progress_printer
from core.bench.export import export_model as write_export
from core.bench.perplexity import compiled_step_perplexity, perplexity, quality_text_path
from core.models import LoadOptions, ModelSource, load_model
from core.models.catalog import CATALOG, MB, find_entry, is_fetched, model_path
from core.models.default_model import fetch_default_model, is_default_model_ready
from core.models.device import DTYPE_BY_NAME
from core.models.fetch import fetch_model
from core.models.options import QUANTIZATIONS, source_from_spec
from core.models.registry import ModelRegistry
from core.paths import AppPaths
from core.remote import RemoteTarget, base_url, list_models, resolve_key


@one_line_errors
def fetch_default(args: argparse.Namespace, paths: AppPaths) -> int:
    if is_default_model_ready(paths):
        print(f"Default model already cached in {paths.models_dir}.")
        return 0
    folder = fetch_default_model(paths.ensure(), progress_printer())
    print(f"Default model ready in {folder}.")
    return 0


@one_line_errors
def fetch(args: argparse.Namespace, paths: AppPaths) -> int:
    """``fetch NAME``: download a catalog model (resuming what an earlier fetch kept); ``fetch --list``: the catalog."""
    if args.list or not args.name:
        print(f"{'id':20} {'size':>8} {'memory':>8}  {'licence':11} {'state':11} model")
        for entry in CATALOG:
            state = "fetched" if is_fetched(entry, paths) else "not fetched"
            print(
                f"{entry.id:20} {entry.size / MB:5.0f} MB {entry.ram / MB:5.0f} MB  {entry.licence:11} {state:11} "
                f"{entry.name}: {entry.description}"
            )
        if not args.list:
            print("\nerror: name a model to fetch, e.g. `lookahead-chat fetch qwen2.5-coder-1.5b`", file=sys.stderr)
            return 2
        return 0
    entry = find_entry(args.name)
    if entry is None:
        ids = ", ".join(e.id for e in CATALOG)
        print(f"error: {args.name!r} is not in the catalog; it has {ids} (see `fetch --list`)", file=sys.stderr)
        return 1
    if is_fetched(entry, paths):
        print(f"{entry.name} is fetched already: {model_path(entry, paths)}")
        return 0
    try:
        where = fetch_model(entry, paths.ensure(), progress_printer())
    except KeyboardInterrupt:
        print(
            f"\nStopped: the parts fetched so far are kept; `lookahead-chat fetch {entry.id}` goes on.", file=sys.stderr
        )
        return 130
    print(f'{entry.name} ready in {where}; chat with it: lookahead-chat ask --model {entry.id} "..."')
    return 0


@one_line_errors
def models(args: argparse.Namespace, paths: AppPaths) -> int:
    if args.remote:
        url = base_url(args.remote)
        for model in asyncio.run(list_models(RemoteTarget(url, resolve_key(url, args.api_key_env or "")))):
            print(model)
        return 0
    for known in ModelRegistry(paths).known():
        state = "ready" if known.available else "not downloaded"
        where = known.source.location or "embedded default"
        print(f"{known.name:32} {known.source.kind:8} {state:15} {where}")
    return 0


@one_line_errors
def export_model(args: argparse.Namespace, paths: AppPaths) -> int:
    """Write a model (the default one unless --model) as a safetensors folder, optionally in parts."""
    out = Path(args.out)
    problem = _export_folder_problem(out)
    if problem:  # said before the model loads (the default model takes about 40 s)
        print(f"error: {problem}", file=sys.stderr)
        return 1
    source = source_from_spec(args.model, paths) if args.model else ModelSource()
    loaded = load_model(
        source,
        LoadOptions(device="cpu", dtype=args.dtype, quantization="none"),
        paths.ensure(),
        progress_printer(f"{source.display_name}: "),
    )
    try:
        result = write_export(
            loaded, out, DTYPE_BY_NAME[args.dtype], args.split_mb * 10**6 if args.split_mb > 0 else None
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, size in result.files:
        print(f"{size / 10**6:10.1f} MB  {result.folder / name}")
    if result.split:
        print(
            f"Split into parts: on the other side run `python -m core.bench.join_parts {result.folder}` "
            "(gpu_check --model joins them by itself)."
        )
    return 0


def _export_folder_problem(out: Path) -> str | None:
    """Why ``out`` cannot take an export (a file, or a folder with something in it); None when it can."""
    if out.is_dir() and any(out.iterdir()):
        return f"The export folder {out} is not empty: choose a new folder, or empty this one first."
    if out.exists() and not out.is_dir():
        return f"The export folder {out} is a file: choose a new folder."
    return None


@one_line_errors
def quality(args: argparse.Namespace, paths: AppPaths) -> int:
    """Perplexity of the model on the shipped fixed text, per quantization (answer quality before and after)."""
    chosen = [q.strip() for q in args.quantizations.split(",") if q.strip()]
    if not chosen or any(q not in QUANTIZATIONS[1:] for q in chosen):
        print(
            f"error: --quantizations takes none, 8bit and 4bit, comma-separated (got {args.quantizations!r})",
            file=sys.stderr,
        )
        return 1
    text = quality_text_path().read_text(encoding="utf-8")
    settings = command_settings(paths)
    for index, quantization in enumerate(chosen):
        args.quantization = quantization
        loaded = load_named_model(args, settings, paths)
        ids = loaded.tokenizer(text)["input_ids"]
        value = perplexity(loaded.model, ids)
        if index == 0:  # once a model loaded: a model that cannot load leaves only its error
            print("| quantization | dtype | perplexity |\n|---|---|---:|")
        dtype = str(loaded.dtype).removeprefix("torch.")
        print(f"| {quantization} | {dtype} | {value:.3f} |")
        compiled = (
            compiled_step_perplexity(loaded.model, ids)
            if quantization == "8bit" and loaded.device.type == "cpu"
            else None
        )
        if compiled is not None:
            stepped, activations = compiled
            print(f"| {quantization}, compiled steps ({activations}) | {dtype} | {stepped:.3f} |")
    print(
        f"({len(ids)} tokens of {quality_text_path().name}; {loaded.name} on {loaded.device_info.label})",
        file=sys.stderr,
    )
    return 0
