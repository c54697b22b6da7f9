"""``lookahead-chat ask``: one answer streamed to stdout, through the same answer job as the window's."""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import replace

from app.cli.collector import collecting_after
from app.cli.loading import command_settings, load_from_args
from app.cli.output import end_progress_line, one_line_errors, progress_printer
from core.chat.answer import prompt_budget
from core.chat.prompt import Message
from core.engine.answer_job import AnswerFigures, AnswerJob, AnswerOutcome, AnswerRequest, AnswerStart
from core.engine.background import BackgroundCalibration, Upgrade
from core.engine.ready import ReadyModel, make_ready
from core.paths import AppPaths
from core.remote import RemoteError, RemoteSource
from core.settings import Settings

FINISHING = "Auto measures this machine once, after this answer (Ctrl+C stops it; the next start goes on from there)"
"""Said in a terminal; from a script ``ask`` stops the background work at exit, keeping what it compiled."""


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


class _Background:
    """The background work's reports (a :class:`core.engine.background.BackgroundListener`): silent while the
    answer streams, a progress line on stderr after it."""

    def __init__(self) -> None:
        self.quiet = True
        self.upgrade: Upgrade | None = None
        self.ended = threading.Event()
        self._show = progress_printer()

    def progress(self, stage: str, fraction: float) -> None:
        if not self.quiet:
            self._show(stage, min(fraction, 0.99))

    def done(self, upgrade: Upgrade) -> None:
        self.upgrade = upgrade
        self.ended.set()


def _finish(background: BackgroundCalibration, reports: _Background, ready: ReadyModel) -> None:
    """Let the background work measure, now that no answer runs, and say what it gave."""
    print(FINISHING, file=sys.stderr)
    reports.quiet = False
    background.resume()
    while not reports.ended.wait(0.2):  # a timed wait: Ctrl+C interrupts it at once
        pass
    end_progress_line()
    upgrade = reports.upgrade
    if upgrade is not None:
        ready.upgrade(upgrade)  # what Auto runs from the next start on
        print(upgrade.message or upgrade.auto.reason, file=sys.stderr)


@one_line_errors
def run(args: argparse.Namespace, paths: AppPaths) -> int:
    if args.remote:
        return _ask_remote(args, paths)
    settings, loaded = load_from_args(args, paths)
    max_new = args.max_new_tokens if args.max_new_tokens is not None else settings.sampling.max_new_tokens
    prompt_budget(loaded.context_length, max_new)  # before anything else: the prompt may not fit
    with collecting_after():  # the prepared step stays until the command ends
        ready = make_ready(loaded, paths.ensure(), progress=progress_printer(), background=True)
    end_progress_line()  # a failed measurement stops short of 100%
    background, reports = ready.background, _Background()
    if background is not None:  # a first start here: the answer comes at once, Auto measures after it
        background.pause()
        background.start(reports)
    try:
        return _answer(args, settings, ready, max_new, background, reports)
    finally:
        if background is not None:
            background.stop()  # the compiling children too; what they finished stays in the cache


def _answer(
    args: argparse.Namespace,
    settings: Settings,
    ready: ReadyModel,
    max_new: int,
    background: BackgroundCalibration | None,
    reports: _Background,
) -> int:
    mode = args.mode or settings.mode
    system = (Message("system", settings.system_prompt),) if settings.system_prompt else ()
    request = AnswerRequest(
        (*system, Message("user", args.prompt)),
        mode,
        settings.lookahead,
        replace(settings.sampling, max_new_tokens=max_new),
    )
    printer = _Printer()
    try:
        AnswerJob(request, printer).steps_job().run(ready)
        outcome = printer.outcome
        if outcome is not None and outcome.figures is not None:  # an answer was started
            sys.stdout.write("\n")
            sys.stdout.flush()  # before stderr's lines: piped, the answer's last line would otherwise end after them
        if outcome is None or outcome.failure is not None:
            failure = outcome.failure.message if outcome is not None and outcome.failure else "the answer did not end"
            print(f"error: {failure}", file=sys.stderr)
            return 1
        ran = ready.info.precision  # what answered (the background work may change it)
        if background is not None and sys.stderr.isatty():  # a script is not kept waiting: the work stops at exit
            _finish(background, reports, ready)
        if args.stats and outcome.figures is not None:  # last: a script reads them off the last lines
            f = outcome.figures
            print(
                f"{f.new_tokens} tokens, {f.tokens_per_second:.1f} tok/s, {f.tokens_per_step:.2f} tokens/step ({f.mode}; {ran})",
                file=sys.stderr,
            )
            if mode == "auto":
                print(ready.auto.reason, file=sys.stderr)
    except KeyboardInterrupt:
        end_progress_line()
        print("\nstopped.", file=sys.stderr)
        return 130
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
    printer = _Printer()
    try:
        AnswerJob(request, printer).steps_job().run(None)
    except KeyboardInterrupt:
        print("\nstopped.", file=sys.stderr)
        return 130
    outcome = printer.outcome
    if outcome is not None and outcome.figures is not None:  # an answer was started
        sys.stdout.write("\n")
        sys.stdout.flush()  # before stderr's lines, as above
    if outcome is None or outcome.failure is not None:
        print(f"error: {outcome.error if outcome is not None else 'the answer did not end'}", file=sys.stderr)
        return 1
    if args.stats and outcome.figures is not None:
        f = outcome.figures
        print(f"{f.new_tokens} tokens, {f.tokens_per_second:.1f} tok/s ({f.mode})", file=sys.stderr)
    return 0
