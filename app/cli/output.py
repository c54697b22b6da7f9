"""What the command line prints besides answers: one updating progress line, and one-line errors."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from core.engine.jobs import describe_failure
from core.paths import AppPaths
from core.progress import ProgressCallback

Command = Callable[[argparse.Namespace, AppPaths], int]


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
            print(f"error: {describe_failure(err, 'The command').message}", file=sys.stderr)
            return 1

    return run


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
