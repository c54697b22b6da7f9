"""What the command line prints besides answers: one updating progress line, and one-line errors."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable

from core.engine.jobs import describe_failure
from core.paths import AppPaths
from core.progress import ProgressCallback

Command = Callable[[argparse.Namespace, AppPaths], int]
DETAILS_HINT = "the details: run it again with --verbose"
MAX_DETAIL = 120  # a library's own text quoted in a message longer than this is left to --verbose

log = logging.getLogger(__name__)


class _StderrLine:
    """Whether a progress line on stderr is still open (an error must start on a line of its own)."""

    open = False


def one_line_errors(command: Command) -> Command:
    """Any failure of ``command`` becomes one ``error: ...`` line on stderr and exit code 1, never a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace, paths: AppPaths) -> int:
        try:
            return command(args, paths)
        except Exception as err:
            end_progress_line()
            print(f"error: {error_message(err, 'The command', verbose=args.verbose)}", file=sys.stderr)
            return 1

    return run


def error_message(err: BaseException, what: str, verbose: bool = False) -> str:
    """What the user reads about ``err``, on one line.

    Our messages quote the library error they come from; one that runs over several lines (transformers'
    tokenizer errors take six) or over :data:`MAX_DETAIL` characters is left to ``--verbose``.
    """
    message = describe_failure(err, what).message
    detail = str(err.__cause__ or "").strip()
    if verbose:
        log.info("%s failed", what, exc_info=err)
    elif detail and detail in message and ("\n" in detail or len(detail) > MAX_DETAIL):
        message = message.replace(detail, DETAILS_HINT)
    return " ".join(message.split())


def end_progress_line() -> None:
    """End a progress line left open (a stage that failed or stopped short of 100%)."""
    if _StderrLine.open:
        sys.stderr.write("\n")
        _StderrLine.open = False


def progress_printer(label: str = "") -> ProgressCallback:
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
