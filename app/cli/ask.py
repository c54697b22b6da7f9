"""``lookahead-chat ask``: one answer streamed to stdout, through the same answer job as the window's."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from app.cli.loading import command_settings, load_from_args
from app.cli.output import end_progress_line, one_line_errors, progress_printer
from core.chat.answer import prompt_budget
from core.chat.prompt import Message
from core.engine.answer_job import AnswerFigures, AnswerJob, AnswerOutcome, AnswerRequest, AnswerStart
from core.engine.ready import ReadyModel, make_ready
from core.paths import AppPaths
from core.remote import RemoteError, RemoteSource


class _Printer:
    """Streams an answer to stdout (a :class:`core.engine.answer_job.AnswerListener`); keeps how it ended."""

    def __init__(self) -> None:
        self.outcome: AnswerOutcome | None = None

    def started(self, start: AnswerStart) -> None:
        if start.note:
            print(f"note: {start.note}", file=sys.stderr)

    def delta(self, text: str, figures: AnswerFigures) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def ended(self, outcome: AnswerOutcome) -> None:
        self.outcome = outcome


@one_line_errors
def run(args: argparse.Namespace, paths: AppPaths) -> int:
    if args.remote:
        return _ask_remote(args, paths)
    settings, loaded = load_from_args(args, paths)
    max_new = args.max_new_tokens if args.max_new_tokens is not None else settings.sampling.max_new_tokens
    prompt_budget(loaded.context_length, max_new)  # before Auto's first measurement, which takes a while
    ready = make_ready(loaded, paths.ensure(), progress=progress_printer())
    end_progress_line()  # a failed measurement stops short of 100%
    mode = args.mode or settings.mode
    system = (Message("system", settings.system_prompt),) if settings.system_prompt else ()
    request = AnswerRequest(
        (*system, Message("user", args.prompt)),
        mode,
        settings.lookahead,
        replace(settings.sampling, max_new_tokens=max_new),
    )
    outcome = _answer(request, ready)
    if isinstance(outcome, int):
        return outcome
    if args.stats and outcome.figures is not None:
        f = outcome.figures
        dtype = str(loaded.dtype).removeprefix("torch.")
        print(
            f"{f.new_tokens} tokens, {f.tokens_per_second:.1f} tok/s, {f.tokens_per_step:.2f} tokens/step ({f.mode}; {dtype})",
            file=sys.stderr,
        )
        if mode == "auto":
            print(ready.auto.reason, file=sys.stderr)
    return 0


def _ask_remote(args: argparse.Namespace, paths: AppPaths) -> int:
    """The answer from the server ``--remote`` names, through the same answer job (no local model loads)."""
    if not args.model:
        raise RemoteError(f"Give the remote model with --model ID (`lookahead-chat models --remote {args.remote}`).")
    settings = command_settings(paths)
    max_new = args.max_new_tokens if args.max_new_tokens is not None else settings.sampling.max_new_tokens
    system = (Message("system", settings.system_prompt),) if settings.system_prompt else ()
    request = AnswerRequest(
        (*system, Message("user", args.prompt)),
        "plain",
        settings.lookahead,
        replace(settings.sampling, max_new_tokens=max_new),
        remote=RemoteSource(args.remote, args.model, args.api_key_env or ""),
    )
    outcome = _answer(request, None)
    if isinstance(outcome, int):
        return outcome
    if args.stats and outcome.figures is not None:
        f = outcome.figures
        print(f"{f.new_tokens} tokens, {f.tokens_per_second:.1f} tok/s ({f.mode})", file=sys.stderr)
    return 0


def _answer(request: AnswerRequest, ready: ReadyModel | None) -> AnswerOutcome | int:
    """Stream the answer to stdout; its outcome, or the exit code after saying why it failed (or was stopped)."""
    printer = _Printer()
    try:
        AnswerJob(request, printer).steps_job().run(ready)
    except KeyboardInterrupt:
        print("\nstopped.", file=sys.stderr)
        return 130
    outcome = printer.outcome
    if outcome is not None and outcome.figures is not None:  # an answer was started
        sys.stdout.write("\n")
        sys.stdout.flush()  # before stderr's lines: piped, the answer's last line would otherwise end after them
    if outcome is None or outcome.failure is not None:
        print(f"error: {outcome.error if outcome is not None else 'the answer did not end'}", file=sys.stderr)
        return 1
    return outcome
