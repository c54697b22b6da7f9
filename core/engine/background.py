"""Auto's calibration in the background: the model answers at once, eagerly and plainly, meanwhile.

A first load on a machine set-up used to measure before the first answer (a minute and more on a
small CPU). Now the loaded model answers at once while a copy of it, sharing its weights, is
prepared here: first the compiled steps of the variants Auto compares compile in child processes at
the lowest priority (they go on while answers run), then ``core.autotune.prepare`` measures, only
while no answer runs: each measured step first passes a :class:`Gate`, which holds it while an
answer runs (the step in progress ends first, milliseconds) and lets it go on after. The result, an
:class:`Upgrade`, replaces the model's step between answers, on the model thread. What is compiled
stays in the cache: work stopped at exit goes on from there at the next start.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from core.autotune.calibration import Calibration
from core.autotune.measure import measure_step_seconds
from core.autotune.prepare import AutoTuning, calibrate_or_plain
from core.autotune.variants import variant_copy, variant_names
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import Cancelled, CancelToken
from core.runtime.compiled.package import CompileJob, KernelsJob, compile_jobs
from core.runtime.compiled.parallel import EXPECTED_SECONDS, report_failure, start_child, stop_child
from core.runtime.compiled.step import why_not_compilable
from core.runtime.prepared import PreparedModel
from core.runtime.weights.variants import copy_sharing_weights, int8_copy

log = logging.getLogger(__name__)

MEASURING_REASON = "Auto: plain until this machine is measured (in the background, while no answer runs)"
COMPILING = "Compiling the faster step in the background"
MEASURING = "Measuring this machine for Auto in the background"
CANCELLED_REASON = "Auto: plain (the measurement was cancelled; it runs again at the next load)"
POLL_S = 0.05


class Gate(CancelToken):
    """A cancel token whose check waits while the gate is paused (an answer runs): a measurement polls it
    before every step, so it stops at its next step and goes on where it stopped."""

    def __init__(self) -> None:
        super().__init__()
        self._open = threading.Event()
        self._open.set()
        self.waiting = threading.Event()  # set while a measurement waits at the gate
        self.waited_at: list[float] = []  # when each wait began (time.monotonic)

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def cancel(self) -> None:
        super().cancel()
        self._open.set()

    @property
    def stopped(self) -> bool:
        """Cancelled, without waiting."""
        return super().cancelled

    @property
    def cancelled(self) -> bool:
        if not self._open.is_set():
            self.waited_at.append(time.monotonic())
            self.waiting.set()
            self._open.wait()
            self.waiting.clear()
        return self.stopped


@dataclass(frozen=True)
class Upgrade:
    """What the background work gives the model thread: Auto's tuning, the model prepared for this machine
    (``None``: nothing was measured, the model stays as it is) and the line that says what got faster."""

    auto: AutoTuning
    loaded: LoadedModel | None = None
    message: str = ""


class BackgroundListener(Protocol):
    """What the background work reports, on its own thread."""

    def progress(self, stage: str, fraction: float) -> None: ...

    def done(self, upgrade: Upgrade) -> None: ...


class BackgroundCalibration:
    """Prepares a copy of ``loaded`` for this machine on a thread of its own (see the module's text).

    ``compile_delay_s``: each compiling child waits that long first (a slow compile, for tests).
    """

    def __init__(self, loaded: LoadedModel, paths: AppPaths, compile_delay_s: float = 0.0) -> None:
        self.loaded, self.paths, self.compile_delay_s = loaded, paths, compile_delay_s
        self.gate = Gate()
        self.children: list[subprocess.Popen] = []  # the compiling children, while they run
        self._jobs: list[CompileJob | KernelsJob] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, listener: BackgroundListener) -> None:
        self._thread = threading.Thread(target=self._run, args=(listener,), name="background-calibration", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        """An answer starts: the measurement stops at its next step (compiling goes on, at low priority)."""
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def cancel(self) -> None:
        """Stop now (the user's Cancel, another load, exit): the children at once, the thread at its next check."""
        self.gate.cancel()
        self._stop_children()

    def stop(self, timeout: float = 5.0) -> bool:
        """:meth:`cancel`, and wait for the thread; True if it ended within ``timeout`` seconds."""
        self.cancel()
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self, listener: BackgroundListener) -> None:
        _lower_thread_priority()
        try:
            upgrade = self._prepare(listener)
        except Cancelled:
            upgrade = Upgrade(AutoTuning(CANCELLED_REASON))
        except Exception as err:  # the model keeps answering as it is
            log.warning("preparing the model in the background failed: %s", err, exc_info=True)
            reason = (
                f"Auto: plain (measuring this machine failed: {type(err).__name__}; it is tried again at the next load)"
            )
            upgrade = Upgrade(AutoTuning(reason))
        finally:
            self._stop_children()
        listener.done(upgrade)

    def _prepare(self, listener: BackgroundListener) -> Upgrade:
        shadow = _shadow(self.loaded)
        before = measure_step_seconds(shadow.prepared, (1,), cancelled=lambda: self.gate.cancelled)[0]
        self._precompile(shadow, listener)
        auto = calibrate_or_plain(shadow, self.paths, lambda _stage, f: listener.progress(MEASURING, f), self.gate)
        if self.gate.stopped:
            raise Cancelled
        if auto.calibration is None:
            return Upgrade(auto)
        return Upgrade(auto, shadow, ready_message(auto, before / auto.calibration.curve.seconds[0]))

    def _precompile(self, shadow: LoadedModel, listener: BackgroundListener) -> None:
        """Compile the step packages (1-token and rows layers) of every variant calibration may compare, and our
        kernels where the int8 decoder runs the int8 variant, in children; wait for them."""
        if shadow.device.type != "cpu" or why_not_compilable(shadow.model) is not None:
            return
        from torch._inductor.cpp_builder import get_cpp_compiler  # inductor takes a second to import: only here

        try:
            get_cpp_compiler()
        except Exception as err:  # no compiler: the step stays eager, and calibration says so
            log.info("no step compiled in the background: %s", err)
            return
        jobs: dict[Path, CompileJob | KernelsJob] = {}
        for make in variant_makers(shadow):
            if self.gate.stopped:
                raise Cancelled
            model = make()
            if why_not_compilable(model) is None:
                for job in compile_jobs(model):
                    jobs.setdefault(job.path, job)
        missing = [job for path, job in jobs.items() if not path.exists()]
        if missing:
            self._compile(missing, listener)

    def _compile(self, missing: list[CompileJob | KernelsJob], listener: BackgroundListener) -> None:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="lookahead-compile-") as folder:
            try:
                with self._lock:
                    if self.gate.stopped:
                        raise Cancelled
                    started = [
                        start_child(job, Path(folder) / f"job-{i}", self.compile_delay_s)
                        for i, job in enumerate(missing)
                    ]
                    self.children, self._jobs = [child for child, _ in started], list(missing)
                while any(child.poll() is None for child, _ in started):
                    if self.gate.stopped:
                        raise Cancelled
                    waited = (time.perf_counter() - start) / (EXPECTED_SECONDS * len(missing))
                    listener.progress(COMPILING, 1 - math.exp(-waited))
                    time.sleep(POLL_S)
                if self.gate.stopped:  # stopped from another thread (cancel() kills the children)
                    raise Cancelled
                for (child, errors), job in zip(started, missing):
                    report_failure(child, errors, job)  # calibration then compiles it here, or the step stays eager
            finally:
                self._stop_children()
        log.info("%d step packages compiled in the background in %.1f s", len(missing), time.perf_counter() - start)

    def _stop_children(self) -> None:
        with self._lock:
            for child, job in zip(self.children, self._jobs):
                stop_child(child, job)
            self.children, self._jobs = [], []


def compiled_step_missing(loaded: LoadedModel, calibration: Calibration, paths: AppPaths) -> bool:
    """Whether the compiled step a stored calibration chose has no package in the cache (cleared, or
    another compile cache): applying it would compile before the first answer, so it is prepared in
    the background instead."""
    compiled = calibration.compiled or calibration.compiled_rows
    if not compiled or loaded.weights_as_stored or why_not_compilable(loaded.model, weights=False) is not None:
        return False
    model = _one_layer(loaded.model)
    if calibration.quantization == "8bit" and loaded.quantization == "none":
        model = int8_copy(model)
    elif calibration.dtype != str(loaded.dtype).removeprefix("torch.") and loaded.quantization == "none":
        model = model.to(getattr(torch, calibration.dtype))
    if why_not_compilable(model) is not None:
        return False
    return any(not job.path.exists() for job in compile_jobs(model) if _wanted(job, calibration))


def _wanted(job: CompileJob | KernelsJob, calibration: Calibration) -> bool:
    """Whether ``calibration`` runs what ``job`` makes (the int8 decoder counts as the rows layer)."""
    if isinstance(job, KernelsJob):
        return calibration.compiled_rows
    return calibration.compiled_rows if job.spec.rows else calibration.compiled


def ready_message(auto: AutoTuning, speedup: float) -> str:
    """The status line's news when the background work is done: what is faster now, and how much."""
    calibration = auto.calibration
    assert calibration is not None
    what = "compiled step" if calibration.compiled or calibration.compiled_rows else f"{calibration.variant} step"
    if speedup < 1.05:
        return f"Auto measured this machine: the step as loaded stays ({speedup:.2f}x)"
    return f"{what} ready: {speedup:.1f}x faster"


def _shadow(loaded: LoadedModel) -> LoadedModel:
    """The model to prepare: on the CPU a copy sharing its weights (preparing converts and repacks them,
    while answers run on the original); on a GPU, or with weights as stored, the model itself (preparing only
    measures it)."""
    if loaded.device.type != "cpu" or loaded.weights_as_stored:  # the latter: nothing is converted
        return dataclasses.replace(loaded)
    return dataclasses.replace(loaded, prepared=PreparedModel(copy_sharing_weights(loaded.model)))


def _one_layer(model: Any) -> Any:
    """A copy of ``model`` (sharing its weights) with its first layer only: a step package is one layer's
    code, and the first layer's shapes and dtypes stand for all, so its variants convert in milliseconds."""
    copied = copy_sharing_weights(model)
    copied.model.layers = copied.model.layers[:1]
    return copied


def variant_makers(loaded: LoadedModel) -> list[Callable[[], Any]]:
    """The variants calibration compares for ``loaded`` (:func:`~core.autotune.variants.variant_names`), as
    one-layer copies."""
    model = loaded.model
    copies = variant_names(loaded)[1:]
    return [lambda: _one_layer(model)] + [lambda name=name: variant_copy(_one_layer(model), name) for name in copies]


def _lower_thread_priority() -> None:
    """Linux: this thread (and the compilers it may start) at a lower priority than the answers' thread."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except OSError as err:
            log.info("the background work keeps its priority: %s", err)
