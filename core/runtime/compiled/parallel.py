"""Compiling the 1-token step of several model variants at once, one child process each.

Compiling a step package is mostly the C++ compiler's work, on one core: about 8 of the 11 s a
variant took here. Calibration compiles two variants (int8 and bf16 weights, say), so compiling
them side by side in two processes, while this one waits, saves most of one compile on a machine
with two cores or more. Each child compiles one :class:`~core.runtime.compiled.package.CompileJob`
into the package cache; the models then load their packages in
:func:`~core.runtime.compiled.step.compile_step`, which compiles in this process whatever a child
did not leave (a child that failed, or could not start). The children run at the lowest priority
(``nice`` 19, Windows' idle class), so that compiling in the background never slows an answer down.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from core.progress import Cancelled
from core.runtime.compiled import kernels
from core.runtime.compiled.package import CompileJob, KernelsJob, compile_jobs, run_job
from core.runtime.compiled.step import why_not_compilable

log = logging.getLogger(__name__)

EXPECTED_SECONDS = 12.0
"""The time scale of the progress reported while the children compile (the default model's took 17-20 s here)."""

CHILD_COMMAND = "_compile-step"
"""The frozen app's first argument that makes it a compiling child (see ``app.cli``)."""

DELAY_OPTION = "--delay"
"""A child's option: seconds to wait before compiling (how tests make a compile slow)."""


def compile_in_parallel(
    models: Sequence[Any], cancelled: Callable[[], bool] | None = None, progress: Callable[[float], None] | None = None
) -> None:
    """Compile the step packages of ``models`` that are not in the cache yet, each in a child process,
    all at once; returns when every child has ended. Does nothing for fewer than two packages or on a
    single core (the first compile in this process is as quick then). Raises
    :class:`~core.progress.Cancelled` (the children stopped) when ``cancelled`` says so.
    ``progress`` hears a fraction that grows with the time waited (:data:`EXPECTED_SECONDS`), then 1.
    """
    from torch._inductor.cpp_builder import get_cpp_compiler  # inductor loads in about a second: only when compiling

    try:
        get_cpp_compiler()  # none (Windows without Visual Studio's, say): no children that could only fail
        jobs = {job.path: job for m in models if why_not_compilable(m) is None for job in compile_jobs(m)}
    except Exception as err:  # compile_step meets the same failure and reports it
        log.warning("step packages not compiled side by side: %s", err)
        return
    missing = [job for path, job in jobs.items() if not path.exists()]
    if len(missing) < 2 or (os.cpu_count() or 1) < 2:
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lookahead-compile-") as folder:
        children: list[tuple[subprocess.Popen, Path]] = []
        try:
            for i, job in enumerate(missing):
                children.append(start_child(job, Path(folder) / f"job-{i}"))
            while any(child.poll() is None for child, _ in children):
                if cancelled is not None and cancelled():
                    raise Cancelled
                if progress is not None:
                    progress(1 - math.exp(-(time.perf_counter() - start) / EXPECTED_SECONDS))
                time.sleep(0.05)
        except OSError as err:  # no room for the job files, or no child started: compile_step compiles here
            log.warning("step packages not compiled side by side: %s", err)
        finally:
            for (child, _), job in zip(children, missing):
                stop_child(child, job)
        for (child, errors), job in zip(children, missing):
            report_failure(child, errors, job)
    if progress is not None:
        progress(1.0)
    log.info("%d step packages compiled side by side in %.1f s", len(missing), time.perf_counter() - start)


def start_child(job: CompileJob | KernelsJob, stem: Path, delay_s: float = 0.0) -> tuple[subprocess.Popen, Path]:
    """A child compiling ``job`` (handed over in a file next to ``stem``) at the lowest priority, and the
    file of its error output. ``delay_s``: the child waits that long first (a slow compile, for tests)."""
    job_file, errors = stem.with_suffix(".pt"), stem.with_suffix(".log")
    torch.save(job, job_file)
    delay = [DELAY_OPTION, str(delay_s)] if delay_s > 0 else []
    flags = getattr(subprocess, "CREATE_NO_WINDOW", 0) | getattr(subprocess, "IDLE_PRIORITY_CLASS", 0)  # Windows
    with errors.open("wb") as sink:
        child = subprocess.Popen(
            [*child_command(), str(job_file), *delay],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=os.name == "posix",  # its compiler processes go with it
            creationflags=flags,
        )
    return child, errors


def report_failure(child: subprocess.Popen, errors: Path, job: CompileJob | KernelsJob) -> None:
    """Log the last line a child that failed wrote (the step is then compiled in this process, or stays eager)."""
    if child.returncode not in (0, None):
        last = (errors.read_text(encoding="utf-8", errors="replace").strip().splitlines() or [""])[-1]
        log.warning("compiling %s in a child process failed (exit %s): %s", job.path.name, child.returncode, last)


def stop_child(child: subprocess.Popen, job: CompileJob | KernelsJob) -> None:
    """Stop a child still running (cancelled), with the compiler it runs, and remove its partial package."""
    if child.poll() is not None:
        return
    if os.name == "posix":
        os.killpg(child.pid, signal.SIGKILL)
    else:
        child.kill()
    child.wait()
    if isinstance(job, KernelsJob):
        kernels.remove_leftovers(job.path, child.pid)
    else:
        job.path.with_name(f"{job.path.stem}.{child.pid}.partial.pt2").unlink(missing_ok=True)  # see compile_package


def child_command() -> list[str]:
    """How to start a compiling child: this module from source, the app itself (with :data:`CHILD_COMMAND`) when frozen."""
    if getattr(sys, "frozen", False):
        return [sys.executable, CHILD_COMMAND]
    return [sys.executable, "-m", __name__]


def child_main(argv: Sequence[str]) -> int:
    """A compiling child: compile the job in the file ``argv[0]`` (after ``--delay S`` seconds), at the lowest
    priority (its compiler processes inherit it); the exit code says whether it did."""
    if os.name == "posix":
        os.nice(19)  # Windows: the parent started it in the idle priority class
        _end_with_parent()
    if len(argv) == 3 and argv[1] == DELAY_OPTION:
        time.sleep(float(argv[2]))
    job: CompileJob | KernelsJob = torch.load(argv[0], weights_only=False)  # written by this app's parent just before
    run_job(job)
    return 0


def _end_with_parent(poll_s: float = 0.5) -> None:
    """Stop this child and its compilers when the parent is gone (killed outright, so it could not stop
    them): a child is the leader of its own process group, which outlives the parent otherwise."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
