"""Downloading one wheel with pip (so the user's pip configuration applies), stopped within a tenth of a second
of a cancel, whether pip is printing or not (a first lookup of the index prints nothing for seconds)."""

from __future__ import annotations

import logging
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from core.progress import CancelToken

log = logging.getLogger(__name__)

POLL_S = 0.1
"""How often a running pip is checked for a cancel."""

_PIP_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")


def pip_command() -> list[str]:
    """How to run pip: ``python -m pip`` from source, the bundled pip in a frozen app."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "_pip"]
    return [sys.executable, "-m", "pip"]


def pip_download(
    requirement: str,
    folder: Path,
    on_fraction: Callable[[float], None],
    cancel: CancelToken | None,
    cancelled: Callable[[], Exception],
) -> tuple[int, str]:
    """``pip download`` of ``requirement`` alone (no dependencies, wheels only, no pip cache) into ``folder``,
    its temporary files in ``folder/pip-temp``; ``on_fraction`` is told the share downloaded. Returns pip's exit
    code and output. Where ``cancel`` is set, pip is killed and ``cancelled()`` is raised."""
    scratch = folder / "pip-temp"
    scratch.mkdir(exist_ok=True)
    cmd = [
        *pip_command(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--progress-bar",
        "raw",
        "--disable-pip-version-check",
        "-d",
        str(folder),
        requirement,
    ]
    env = {**os.environ, "TMPDIR": str(scratch), "TEMP": str(scratch), "TMP": str(scratch), "PYTHONUNBUFFERED": "1"}
    log.info("running %s", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc, lines), name="pip-output", daemon=True)
    reader.start()
    output: list[str] = []
    while True:
        if cancel is not None and cancel.cancelled:
            proc.kill()
            proc.wait()
            raise cancelled()
        try:
            line = lines.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if line is None:
            break
        output.append(line)
        match = _PIP_PROGRESS.search(line)
        if match and int(match.group(2)) > 0:
            on_fraction(int(match.group(1)) / int(match.group(2)))
    return proc.wait(), "".join(output)


def _read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Pass pip's output on line by line (a thread: the caller keeps checking for a cancel)."""
    assert proc.stdout is not None
    with proc.stdout:
        for line in proc.stdout:
            lines.put(line)
    lines.put(None)
