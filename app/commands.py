"""The headless sub-commands of ``lookahead-chat`` (Qt only to draw the benchmark chart)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from dataclasses import replace

from core.paths import AppPaths

Command = Callable[[argparse.Namespace, AppPaths], int]
API_KEY_VARIABLE = "LOOKAHEAD_CHAT_API_KEY"  # serve's API key, kept out of the process list


class _StderrLine:
    """Whether a progress line on stderr is still open (an error must start on a line of its own)."""

    open = False


def one_line_errors(command: Command) -> Command:
    """Any failure of ``command`` becomes one ``error: ...`` line on stderr and exit code 1, never a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace, paths: AppPaths) -> int:
        from core.jobs import describe_failure

        try:
            return command(args, paths)
        except Exception as err:
            _end_progress_line()
            print(f"error: {describe_failure(err, 'The command').message}", file=sys.stderr)
            return 1

    return run


def _end_progress_line() -> None:
    """End a progress line left open (a stage that failed or stopped short of 100%)."""
    if _StderrLine.open:
        sys.stderr.write("\n")
        _StderrLine.open = False


def _progress_printer(label: str = ""):
    """A progress callback drawing one updating line on stderr."""
    last = [""]

    def show(stage: str, fraction: float) -> None:
        line = f"\r{label}{stage}: {fraction * 100:5.1f}%"
        if line != last[0]:
            sys.stderr.write(line.ljust(len(last[0])))
            sys.stderr.flush()
            last[0] = line
        _StderrLine.open = fraction < 1.0
        if fraction >= 1.0:
            sys.stderr.write("\n")

    return show


@one_line_errors
def fetch_default(args: argparse.Namespace, paths: AppPaths) -> int:
    from core.models.default_model import fetch_default_model, is_default_model_ready

    if is_default_model_ready(paths):
        print(f"Default model already cached in {paths.models_dir}.")
        return 0
    folder = fetch_default_model(paths.ensure(), _progress_printer())
    print(f"Default model ready in {folder}.")
    return 0


@one_line_errors
def models(args: argparse.Namespace, paths: AppPaths) -> int:
    from core.models.registry import ModelRegistry

    for known in ModelRegistry(paths).known():
        state = "ready" if known.available else "not downloaded"
        where = known.source.location or "embedded default"
        print(f"{known.name:32} {known.source.kind:8} {state:15} {where}")
    return 0


def load_from_args(args: argparse.Namespace, paths: AppPaths):
    """Load the model the settings name, with any command-line overrides."""
    from core.models import load_model
    from core.models.options import source_from_spec
    from core.settings import SettingsStore

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # our own progress line says the same, once
    settings = SettingsStore(paths.config_dir).load().settings
    source = source_from_spec(args.model) if args.model else settings.source
    options = replace(
        settings.load,
        **{k: v for k, v in (("device", args.device), ("dtype", args.dtype), ("quantization", args.quantization)) if v},
    )
    return settings, load_model(source, options, paths.ensure(), _progress_printer(f"{source.display_name}: "))




class _Printer:
    """Streams an answer's steps to stdout; remembers a failure (a :class:`core.jobs.JobListener`)."""

    def __init__(self) -> None:
        self.failure = None

    def yielded(self, deltas: list) -> None:
        sys.stdout.write("".join(d.text for d in deltas))
        sys.stdout.flush()

    def errored(self, failure) -> None:
        self.failure = failure

    def aborted(self) -> None:
        """Not reached: the command line has no Stop (Ctrl+C interrupts it)."""

    def finished(self) -> None:
        """Nothing to add: the text is out."""


@one_line_errors
def ask(args: argparse.Namespace, paths: AppPaths) -> int:
    from core.calibration import calibrate_or_plain, save_learned
    from core.chat.answer import Answer
    from core.chat.prompt import Message
    from core.jobs import Throttle, run_steps
    from core.progress import CancelToken
    from core.tuning import decoding_plan

    settings, loaded = load_from_args(args, paths)
    auto_reason = calibrate_or_plain(loaded, paths.ensure(), _progress_printer())
    _end_progress_line()  # a failed measurement stops short of 100%
    mode = args.mode or settings.mode
    messages = [Message("system", settings.system_prompt), Message("user", args.prompt)] if settings.system_prompt else [Message("user", args.prompt)]
    plan = decoding_plan(mode, settings.lookahead, loaded)
    holder: list[Answer] = []

    def build() -> Answer:
        answer = Answer(loaded, messages, lookahead=plan.lookahead, chooser=plan.chooser,
                        max_new_tokens=args.max_new_tokens if args.max_new_tokens is not None else settings.sampling.max_new_tokens,
                        stop_strings=settings.sampling.stop_strings, sampling=settings.sampling)
        if answer.note:
            print(f"note: {answer.note}", file=sys.stderr)
        holder.append(answer)
        return answer

    printer = _Printer()
    try:
        run_steps(build, printer, CancelToken(), throttle=Throttle(interval=0.0), what="The answer")
    except KeyboardInterrupt:
        print("\nstopped.", file=sys.stderr)
        return 130
    if holder:
        sys.stdout.write("\n")
        sys.stdout.flush()  # before stderr's lines: piped, the answer's last line would otherwise end after them
    if printer.failure is not None:
        print(f"error: {printer.failure.message}", file=sys.stderr)
        return 1
    save_learned(loaded, paths)
    if args.stats:
        s = holder[0].stats
        ran = f"auto: {s.settings_summary}" if plan.chooser is not None else plan.label
        dtype = str(loaded.dtype).removeprefix("torch.")
        print(f"{s.new_tokens} tokens, {s.tokens_per_second:.1f} tok/s, {s.tokens_per_step:.2f} tokens/step ({ran}; {dtype})", file=sys.stderr)
        if mode == "auto":
            print(auto_reason, file=sys.stderr)
    return 0


@one_line_errors
def serve(args: argparse.Namespace, paths: AppPaths) -> int:
    """Serve the OpenAI-compatible API headless until Ctrl+C or SIGTERM: one model, one model thread, requests in order."""
    import asyncio
    import os
    import signal

    from core.calibration import calibrate_or_plain
    from core.server.answer_job import AnswerDefaults
    from core.server.config import ServerConfig
    from core.server.runner import ThreadRunner
    from core.server.service import LocalServer, ServerStartError

    settings, loaded = load_from_args(args, paths)
    reason = calibrate_or_plain(loaded, paths.ensure(), _progress_printer())
    _end_progress_line()
    print(reason, file=sys.stderr)
    wanted = {"port": args.port, "api_key": os.environ.get(API_KEY_VARIABLE) if args.api_key is None else args.api_key,
              "max_tokens": args.max_tokens}
    config = replace(ServerConfig.from_settings(replace(settings.server, allow_network=args.allow_network or settings.server.allow_network)),
                     **{k: v for k, v in wanted.items() if v is not None})
    if config.host != "127.0.0.1" and not config.api_key:
        print("warning: other computers may connect and no API key is set (--api-key)", file=sys.stderr)
    defaults = AnswerDefaults.from_settings(replace(settings, mode=args.mode) if args.mode else settings)
    runner = ThreadRunner(loaded)
    server = LocalServer(runner, lambda: defaults, config)

    async def run() -> None:
        await server.start()
        stopped = asyncio.Event()
        try:  # a service manager's stop (systemd, docker stop) ends it as Ctrl+C does
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        except (NotImplementedError, AttributeError):  # Windows: no SIGTERM to handle there
            pass
        print(f"Serving {loaded.name} on {server.url} (Ctrl+C stops)", flush=True)
        try:
            await stopped.wait()
        finally:
            await server.stop()

    try:
        asyncio.run(run())
        print("stopped.", file=sys.stderr)
    except ServerStartError as err:
        print(f"error: the server {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped.", file=sys.stderr)
    finally:
        runner.close()
    return 0


@one_line_errors
def bench(args: argparse.Namespace, paths: AppPaths) -> int:
    """Benchmark the methods side by side; print a Markdown table, write JSON and a PNG chart."""
    if args.peers:
        return _peer_bench(args, paths)
    import json
    import time
    from pathlib import Path

    import torch

    from core.bench.report import markdown_table, report_json, summarize
    from core.bench.runner import AUTO, PLAIN_LOOP, REFERENCE, BenchRunner, Method
    from core.bench.suites import load_suite
    from core.calibration import fastest_step
    from core.lookahead.auto import AutoChooser, calibrate, calibrate_dtypes
    from core.lookahead.compiled_step import set_compile_cache
    from core.models.variants import int8_copy

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
    set_compile_cache(paths.cache_dir)
    settings, loaded = load_from_args(args, paths)
    if args.overhead:
        return _overhead(loaded)
    variants = {}
    if not dtypes and loaded.device.type == "cpu" and loaded.requested_dtype == "auto" and loaded.quantization == "none":
        dtypes = ["fp32", "bf16"]  # what the app's Auto chooses between on the CPU
        if loaded.requested_quantization == "auto":
            variants["int8"] = int8_copy(loaded.model)  # and int8 weights, when they are clearly faster
    runner = BenchRunner(loaded, args.max_new_tokens, extra_dtypes=dtypes, repetition_penalty=args.repetition_penalty,
                         extra_models=variants)
    names = list(runner.models)
    steps = {name: fastest_step(model) for name, model in runner.models.items()}  # as the app's calibration does
    layouts = {name: layout for name, (layout, _) in steps.items()}
    compiled = [name for name, (_, is_compiled) in steps.items() if is_compiled]
    print("weight layouts: " + ", ".join(f"{name} {layout}" for name, layout in layouts.items())
          + f"; compiled 1-token step: {', '.join(compiled) or 'none'}", file=sys.stderr)
    tag = (lambda d: f" [{d}]") if len(names) > 1 else (lambda d: "")
    calibration = None
    if "auto" in specs:
        start = time.perf_counter()
        calibration = calibrate_dtypes(runner.models) if len(names) > 1 else calibrate(loaded.model)
        calibration.compiled = (calibration.variant if len(names) > 1 else names[0]) in compiled
        runner.chooser = AutoChooser(calibration)
        print(f"{calibration.reason}; runs {calibration.variant}; calibration {time.perf_counter() - start:.1f} s", file=sys.stderr)
    run_dtype = calibration.variant if calibration else names[0]
    methods: list[Method] = []
    for d in names:
        if not args.no_peers:
            methods.append(Method(REFERENCE + tag(d), "generate", dtype=d))
        methods.append(Method(PLAIN_LOOP + tag(d), "loop", dtype=d))
    if calibration is not None:
        methods.append(Method(AUTO + tag(run_dtype), AUTO))
    pools = {"on": ["prompt"], "off": ["none"], "both": ["prompt", "none"]}[args.prompt_pool]
    if args.conversation_pool:
        pools += ["message", "conversation"]
    for config in fixed:
        for pool in pools:
            suffix = "" if pool == "prompt" else f" {pool} pool" if pool != "none" else " no prompt pool"
            methods.append(Method(f"lookahead {config.label}{suffix}{tag(run_dtype)}", "loop", config, pool=pool, dtype=run_dtype))
    if not args.no_peers:
        methods.append(Method(f"prompt lookup {10}{tag(run_dtype)}", "prompt_lookup", dtype=run_dtype))
    runner.warm_up(methods)
    start = time.perf_counter()
    results = runner.run(suites, methods, _progress_printer("bench: "))
    rows = summarize(results, REFERENCE + tag(names[0]), PLAIN_LOOP + tag(names[0]))
    penalty = f", repetition penalty {args.repetition_penalty}" if args.repetition_penalty != 1.0 else ""
    title = (f"{loaded.name}, {loaded.device_info.label}, {'/'.join(names)}, {torch.get_num_threads()} threads, "
             f"{args.max_new_tokens} new tokens{penalty}")
    print(markdown_table(rows, title))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"model": loaded.name, "device": loaded.device_info.label, "dtypes": names, "layouts": layouts, "compiled": compiled,
            "threads": torch.get_num_threads(),
            "max_new_tokens": args.max_new_tokens, "repetition_penalty": args.repetition_penalty,
            "seconds": time.perf_counter() - start, "suites": [s.name for s in suites], "methods": [m.name for m in methods],
            "calibration": calibration.as_dict() if calibration else None,
            "auto_rates": runner.chooser.rates() if runner.chooser else None,
            "auto_learned": {k: list(v) for k, v in runner.chooser.learned().items()} if runner.chooser else None}
    (out / "bench.json").write_text(json.dumps(report_json(rows, results, meta), indent=1))
    _save_chart(rows, out / "bench.png")
    print(f"Wrote {out / 'bench.json'} and {out / 'bench.png'}.", file=sys.stderr)
    return 0


def _peer_bench(args: argparse.Namespace, paths: AppPaths) -> int:
    """Our plain decoding beside llama.cpp's llama-bench tg, per precision, on the default model."""
    import torch

    from core.bench.peers import (GGUF_TYPES, PeerRow, ensure_llama_cpp, gguf_at, our_model, our_plain_rate, peer_table,
                                  run_llama_bench)
    from core.models import LoadOptions, ModelSource, load_model
    from core.models.default_model import fetch_default_gguf

    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not precisions or any(p not in GGUF_TYPES for p in precisions):
        print(f"error: --precisions takes {', '.join(GGUF_TYPES)}, comma-separated (got {args.precisions!r})", file=sys.stderr)
        return 1
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    paths.ensure()
    ensure_llama_cpp(paths, progress=_progress_printer("llama.cpp: "))
    source = fetch_default_gguf(paths, _progress_printer())
    base = load_model(ModelSource(), LoadOptions(device="cpu", dtype="fp32", quantization="none"), paths,
                      _progress_printer("SmolLM2-135M-Instruct: ")).model
    rows = []
    for precision in precisions:
        print(f"{precision}: ours...", file=sys.stderr)
        ours = our_plain_rate(our_model(base, precision), args.max_new_tokens, args.repetitions)
        print(f"{precision}: llama.cpp {GGUF_TYPES[precision]}...", file=sys.stderr)
        theirs = run_llama_bench(paths, gguf_at(paths, source, precision), threads, args.max_new_tokens, args.repetitions)
        rows.append(PeerRow(precision, ours, theirs))
    print(peer_table(rows, f"SmolLM2-135M-Instruct, CPU, {threads} threads, plain decoding tg{args.max_new_tokens}, "
                           f"mean of {args.repetitions} runs"))
    return 0


@one_line_errors
def quality(args: argparse.Namespace, paths: AppPaths) -> int:
    """Perplexity of the model on the shipped fixed text, per quantization (answer quality before and after)."""
    from core.bench.perplexity import perplexity, quality_text_path
    from core.models.options import QUANTIZATIONS

    chosen = [q.strip() for q in args.quantizations.split(",") if q.strip()]
    if not chosen or any(q not in QUANTIZATIONS[1:] for q in chosen):
        print(f"error: --quantizations takes none, 8bit and 4bit, comma-separated (got {args.quantizations!r})", file=sys.stderr)
        return 1
    text = quality_text_path().read_text(encoding="utf-8")
    print("| quantization | dtype | perplexity |\n|---|---|---:|")
    for quantization in chosen:
        args.quantization = quantization
        _, loaded = load_from_args(args, paths)
        ids = loaded.tokenizer(text)["input_ids"]
        value = perplexity(loaded.model, ids)
        print(f"| {quantization} | {str(loaded.dtype).removeprefix('torch.')} | {value:.3f} |")
    print(f"({len(ids)} tokens of {quality_text_path().name}; {loaded.name} on {loaded.device_info.label})", file=sys.stderr)
    return 0


def _parse_config(spec: str) -> LookaheadConfig:
    """``W:N:G`` as a validated config."""
    from core.lookahead.config import LookaheadConfig

    parts = spec.split(":")
    if len(parts) != 3:
        raise ValueError("three numbers are needed")
    window, ngram, guesses = (int(v) for v in parts)
    return LookaheadConfig(window, ngram, guesses)


def _overhead(loaded) -> int:
    """Print where the milliseconds of a plain and a lookahead-sized step go, per step implementation."""
    from core.bench.overhead import profile_steps, profile_table

    print(profile_table(profile_steps(loaded.model)))
    return 0


def _save_chart(rows, path) -> None:
    """Draw the per-suite chart with the app's QPainter charts (offscreen)."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.charts import save_bench_chart

    save_bench_chart(rows, path)


@one_line_errors
def tune(args: argparse.Namespace, paths: AppPaths) -> int:
    """Measure every setting's tokens per step on the suites for this model; Auto predicts from them."""
    from core.calibration import ensure_calibrated
    from core.tuning import estimate_table, tune as run_tune

    _, loaded = load_from_args(args, paths)
    ensure_calibrated(loaded, paths.ensure(), _progress_printer())
    calibration = run_tune(loaded, paths.ensure(), prompts_per_suite=args.prompts, progress=_progress_printer("tune: "))
    curve = calibration.curve
    base = curve.seconds[0]
    print(f"Step cost on {loaded.device_info.label}, {loaded.name}, {calibration.dtype} (relative to a 1-token step of {base * 1000:.1f} ms):")
    print("| tokens fed | " + " | ".join(str(s) for s in curve.sizes) + " |")
    print("|---|" + "---:|" * len(curve.sizes))
    print("| cost | " + " | ".join(f"{t / base:.2f}" for t in curve.seconds) + " |")
    print()
    print(estimate_table(calibration.estimates))
    print(f"\n{calibration.reason}.")
    return 0


@one_line_errors
def export_model(args: argparse.Namespace, paths: AppPaths) -> int:
    """Write a model (the default one unless --model) as a safetensors folder, optionally in parts."""
    from pathlib import Path

    from core.models import LoadOptions, ModelSource, load_model
    from core.models.device import DTYPE_BY_NAME
    from core.models.export import export_model as write_export
    from core.models.options import source_from_spec

    source = source_from_spec(args.model) if args.model else ModelSource()
    loaded = load_model(source, LoadOptions(device="cpu", dtype=args.dtype, quantization="none"), paths.ensure(),
                        _progress_printer(f"{source.display_name}: "))
    try:
        result = write_export(loaded, Path(args.out), DTYPE_BY_NAME[args.dtype], args.split_mb * 10**6 if args.split_mb > 0 else None)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, size in result.files:
        print(f"{size / 10**6:10.1f} MB  {result.folder / name}")
    if result.split:
        print(f"Split into parts: on the other side run `python -m core.bench.join_parts {result.folder}` "
              "(gpu_check --model joins them by itself).")
    return 0


def self_test(paths: AppPaths) -> int:
    """Load the default model, generate 16 tokens plain and lookahead, check they agree (one line on failure)."""
    from core.jobs import describe_failure

    try:
        return _self_test(paths)
    except Exception as err:
        print(f"self-test FAILED: {describe_failure(err, 'The self-test').message}")
        return 1


def _self_test(paths: AppPaths) -> int:
    import time

    from core.lookahead import Decoding, LookaheadConfig
    from core.models import LoadOptions, ModelSource, load_model

    start = time.perf_counter()
    loaded = load_model(ModelSource(), LoadOptions(dtype="fp32"), paths.ensure(), _progress_printer("self-test: "))
    ids = loaded.tokenizer("def fibonacci(n):\n    ")["input_ids"]
    plain = Decoding(loaded.model, ids, max_new_tokens=16)
    lookahead = Decoding(loaded.model, ids, lookahead=LookaheadConfig(4, 4, 4), max_new_tokens=16)
    list(plain), list(lookahead)
    same = plain.tokens == lookahead.tokens and len(plain.tokens) == 16
    verdict = "passed" if same else "FAILED (plain and lookahead differ)"
    print(
        f"self-test {verdict}: {loaded.name} on {loaded.device_info.label}, 16 tokens, "
        f"{lookahead.stats.tokens_per_step:.2f} tokens/step, {time.perf_counter() - start:.1f} s"
    )
    return 0 if same else 1
