"""Auto's calibration of a loaded model: measured once per machine set-up, cached, reused.

The cache key is everything the step cost depends on: the processor or GPU, the model, the dtype
asked for, the quantization, the torch version and the thread count. Change any of them and the
next load measures again. On the CPU with dtype ``auto`` it also picks the dtype whose plain
decoding is fastest here (fp32 or bf16) and converts the model to it. What the answers measure
(tokens per step of each setting) is saved with it, so the next start begins from this model's
own figures.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from core.atomic import write_json_atomic
from core.lookahead.auto import AutoChooser, Calibration, Cancelled, calibrate, calibrate_dtypes, measure_step_seconds
from core.lookahead.compiled_step import (
    choose_compiled_step,
    compile_step,
    compiled_layer,
    kept_step_seconds,
    set_compile_cache,
    why_not_compilable,
)
from core.lookahead.model_step import step_kind
from core.lookahead.parallel_compile import compile_in_parallel
from core.models.cpu_packed import PACKED, PACKED_ROWS, PLAIN, apply_layout, choose_layout, layout_of, rows_copy_allowed, rows_copy_fits
from core.models.device import system_memory
from core.models.loader import LoadedModel
from core.models.variants import bf16_copy, int8_copy, variant_bytes
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback, no_progress

log = logging.getLogger(__name__)

CALIBRATION_VERSION = 6  # 2: the lean LLaMA step's cost; 3: the CPU weight layout measured fastest; 4: the compiled step;
# 5: packed (fp32) weights compiled too, on a plain copy; 6: the compiled step's own int8 products and head (int8 may win now)
STAGE = "Measuring this machine for Auto (once)"
COMPILE_STAGE = "Loading the compiled decoding step"


def calibration_key(loaded: LoadedModel) -> dict[str, Any]:
    """Everything the step cost depends on."""
    return {
        "version": CALIBRATION_VERSION,
        "device": _device_name(loaded.device),
        "model": f"{loaded.source.kind}:{loaded.source.location or loaded.name}",
        "dtype": loaded.requested_dtype,
        "quantization": loaded.requested_quantization,
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if loaded.device.type == "cpu" else 0,
        "step": step_kind(loaded.model),
    }


def calibration_path(paths: AppPaths, loaded: LoadedModel) -> Path:
    digest = hashlib.sha256(json.dumps(calibration_key(loaded), sort_keys=True).encode()).hexdigest()[:16]
    return paths.data_dir / "calibration" / f"{digest}.json"


def ensure_calibrated(
    loaded: LoadedModel, paths: AppPaths, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> Calibration | None:
    """Give ``loaded`` its calibration and Auto chooser: from the cache, or measured now.

    May convert the model to the faster dtype (CPU, dtype auto). Returns ``None`` when cancelled;
    Auto then decodes plain until the next load measures again.
    """
    path = calibration_path(paths, loaded)
    cached = _read(path)
    set_compile_cache(paths.cache_dir)
    if cached is not None:
        calibration = cached
        _convert(loaded, calibration.dtype, calibration.quantization, calibration.layout)
        if calibration.compiled:
            progress(COMPILE_STAGE, 0.0)
            reason = compile_step(loaded.model)  # loads the stored package (compiles only if it is gone)
            if reason is not None:
                log.warning("the 1-token step stays eager: %s", reason)
                calibration.compiled = False
                if calibration.layout == PACKED_ROWS and not rows_copy_allowed(loaded.model):  # the plain copy
                    apply_layout(loaded.model, PACKED)  # was for the compiled step only (fp32): not kept in memory
                    calibration.layout = PACKED
            progress(COMPILE_STAGE, 1.0)
    else:
        try:
            calibration = _measure(loaded, progress, cancel)
        except Cancelled:
            log.info("calibration cancelled")
            return None
        _write(path, loaded, calibration, {})
        progress(STAGE, 1.0)
    loaded.calibration = calibration
    loaded.chooser = AutoChooser(calibration)
    log.info("%s (calibration %.1f s)", calibration.reason, calibration.seconds)
    return calibration


def calibrate_or_plain(
    loaded: LoadedModel, paths: AppPaths, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> str:
    """:func:`ensure_calibrated` for the window and ``ask``: a failure leaves Auto decoding plain.

    A model that cannot run the measurement's wide steps (out of memory on a small GPU, say) may
    still answer plainly. Returns the line that says what Auto runs.
    """
    try:
        calibration = ensure_calibrated(loaded, paths, progress, cancel)
    except Exception as err:  # noqa: BLE001 - any failure here must leave the model usable
        log.warning("measuring this machine for Auto failed: %s", err, exc_info=True)
        if loaded.device.type == "cuda":
            torch.cuda.empty_cache()
        return f"Auto: plain (measuring this machine failed: {type(err).__name__}; it is tried again at the next load)"
    if calibration is None:
        return "Auto: plain (the measurement was cancelled; it runs again at the next load)"
    return calibration.reason


def save_learned(loaded: LoadedModel, paths: AppPaths) -> None:
    """Keep what the answers measured (tokens per step per setting) for the next start."""
    if loaded.calibration is None or loaded.chooser is None:
        return
    learned = loaded.chooser.learned()
    if learned:
        save_tokens_per_step(loaded, paths, learned)


def save_tokens_per_step(loaded: LoadedModel, paths: AppPaths, measured: dict[str, tuple[float, float]]) -> None:
    """Merge measured (tokens per step, tokens fed) per setting label into the cached calibration."""
    if loaded.calibration is None:
        return
    path = calibration_path(paths, loaded)
    try:
        learned = {str(k): tuple(v) for k, v in json.loads(path.read_text(encoding="utf-8")).get("learned", {}).items()}
    except (OSError, ValueError, AttributeError):
        learned = {}
    learned.update(measured)
    try:
        _write(path, loaded, loaded.calibration, learned)
    except OSError as err:  # a full disk must not stop the chat; the figures are measured again
        log.warning("could not save Auto's measurements: %s", err)


def _measure(loaded: LoadedModel, progress: ProgressCallback, cancel: CancelToken | None) -> Calibration:
    start = time.perf_counter()
    cancelled = (lambda: cancel.cancelled) if cancel is not None else None
    report = lambda fraction: progress(STAGE, min(fraction, 0.99))  # noqa: E731
    report(0.0)  # the compiles come first: the status bar says what the wait is for at once
    tries_dtypes = loaded.device.type == "cpu" and loaded.requested_dtype == "auto" and loaded.quantization == "none"
    if tries_dtypes and loaded.dtype in (torch.float32, torch.bfloat16):
        calibration = _measure_variants(loaded, report, cancelled)
    else:
        layout, compiled = fastest_step(loaded.model, cancelled)
        calibration = calibrate(loaded.model, progress=report, cancelled=cancelled)
        calibration.layout, calibration.compiled = layout, compiled
    calibration.seconds = time.perf_counter() - start  # copies, weight layouts and curves: all the user waited for
    return calibration


def _measure_variants(loaded: LoadedModel, report: Callable[[float], None], cancelled: Callable[[], bool] | None) -> Calibration:
    """The model as loaded (fp32 or bf16), bf16 and (quantization auto) int8 weights, each in its faster
    layout and step; keep the fastest. Copies that would not fit in the free memory are not tried."""
    models = {"fp32" if loaded.dtype == torch.float32 else "bf16": loaded.model}
    wanted = (["bf16"] if loaded.dtype == torch.float32 else []) + (["int8"] if loaded.requested_quantization == "auto" else [])
    memory = system_memory()
    room = memory.available if memory is not None else None
    untried = []
    for name in wanted:
        needed = int(COPY_MEMORY_MARGIN * variant_bytes(loaded.model, name))
        if room is not None and needed > room:
            log.warning("%s weights not tried: they need %.1f GB, and %.1f GB of memory is free", name, needed / 1e9, room / 1e9)
            untried.append(name)
            continue
        models[name] = (bf16_copy if name == "bf16" else int8_copy)(loaded.model)
        room = None if room is None else room - needed
    try:
        # after the copies are made: packing replaces the float layers
        one_token = _fastest_steps(models, cancelled, lambda fraction: report(STEPS_SHARE * fraction))
        calibration = calibrate_dtypes(models, progress=lambda fraction: report(STEPS_SHARE + (1 - STEPS_SHARE) * fraction),
                                       cancelled=cancelled, one_token=one_token)
        if calibration.quantization == "8bit":
            loaded.model, loaded.dtype, loaded.quantization = models["int8"], torch.bfloat16, "8bit"
        elif calibration.dtype_label == "bf16":
            loaded.model, loaded.dtype = models["bf16"], torch.bfloat16
        calibration.layout = layout_of(loaded.model)
        calibration.compiled = compiled_layer(loaded.model) is not None
        calibration.untried = tuple(untried)
        return calibration
    finally:
        models.clear()  # the copies not kept are freed; no gc.collect() here: on this (worker) thread it can
        # destroy Qt objects off the GUI thread, a crash (app/gc_guard.py collects on the GUI thread)


def fastest_step(model: Any, cancelled: Callable[[], bool] | None = None) -> tuple[str, bool]:
    """Leave ``model`` in its fastest weight layout and with the compiled 1-token step where that measures
    faster here (CPU); returns the layout and whether the step is compiled.

    Packed weights (fp32 here) get a plain copy for the compiled step to read, the wider steps keeping
    the packed ones; the copy stays only if the compiled step does."""
    layout = choose_layout(model, cancelled)
    if model.device.type != "cpu":
        return layout, False
    if _compiles_on_a_rows_copy(model):
        apply_layout(model, PACKED_ROWS)
        if choose_compiled_step(model, cancelled):
            return PACKED_ROWS, True
        apply_layout(model, PACKED)
        return PACKED, False
    return layout, choose_compiled_step(model, cancelled)


def _compiles_on_a_rows_copy(model: Any) -> bool:
    """Packed weights whose compiled step :func:`fastest_step` tries on a plain copy of them (``packed+rows``)."""
    return layout_of(model) == PACKED and why_not_compilable(model, weights=False) is None and rows_copy_fits(model)


LAYOUT_HOPE = 2.0
"""How much slower than the fastest variant's eager step (all in the plain layout) a variant's may be and
still have its weight layouts measured: packing made the default model's fp32 step 1.5 times faster here."""


COMPILE_HOPE = 1.25
"""How much more than the largest gain measured so far compiling might give another variant's step."""


COPY_MEMORY_MARGIN = 1.25
"""Free memory a variant's copy must leave room for, over its weights' bytes: the temporaries of
quantizing and of the weight layouts, and the steps' own memory."""


STEPS_SHARE = 0.9
"""The part of the progress bar for the variants' layouts and compiled steps (the curves take the rest)."""


def _fastest_steps(models: dict[str, Any], cancelled: Callable[[], bool] | None,
                   progress: Callable[[float], None] = lambda fraction: None) -> dict[str, float]:
    """:func:`fastest_step` for each variant (name -> model), from the fastest eager step on; a variant
    whose plain eager step is over :data:`LAYOUT_HOPE` times the fastest one keeps the plain layout, and is
    not compiled (10-14 s each) when even :data:`COMPILE_HOPE` times the best compile gain measured
    so far would leave its step slower than the fastest step so far. The two with the fastest eager
    steps are compiled side by side first (:func:`compile_in_parallel`). Returns each variant's
    1-token step seconds as it now runs."""
    eager = {name: _one_token_seconds(model, cancelled) for name, model in models.items()}  # as they come: plain
    progress(0.05)
    fastest_plain = min(eager.values())
    for i, (name, model) in enumerate(models.items()):
        if eager[name] > LAYOUT_HOPE * fastest_plain:
            log.info("%s: no weight layout tried, its eager step (%.1f ms) is too slow", name, 1000 * eager[name])
        elif choose_layout(model, cancelled) != PLAIN:
            eager[name] = _one_token_seconds(model, cancelled)
        progress(0.05 + 0.1 * (i + 1) / len(models))
    order = sorted(eager, key=eager.__getitem__)
    # the first two compiles side by side (most of the wait); packed weights get their plain copy for it, as in
    # fastest_step, which makes it again (cheap) and keeps it only if the compiled step is kept
    first = [models[name] for name in order[:2]]
    packed = [model for model in first if _compiles_on_a_rows_copy(model)]
    for model in packed:
        apply_layout(model, PACKED_ROWS)
    try:
        compile_in_parallel(first, cancelled, lambda fraction: progress(0.15 + 0.7 * fraction))
    finally:
        for model in packed:
            apply_layout(model, PACKED)
    fastest, gain, seconds = float("inf"), 1.0, dict(eager)
    for i, name in enumerate(order):
        progress(0.85 + 0.15 * i / len(order))
        if not compiling_may_pay(eager[name], fastest, gain):
            log.info("%s: not compiled, its eager step (%.1f ms) could not overtake %.1f ms", name, 1000 * eager[name], 1000 * fastest)
            continue
        if fastest_step(models[name], cancelled)[1]:
            seconds[name] = kept_step_seconds(models[name]) or _one_token_seconds(models[name], cancelled)
        gain, fastest = max(gain, eager[name] / seconds[name]), min(fastest, seconds[name])
    return seconds


def compiling_may_pay(eager_seconds: float, fastest_seconds: float, best_gain: float) -> bool:
    """Whether a variant's eager step, made :data:`COMPILE_HOPE` times the best compile gain measured
    so far faster, would beat the fastest step so far."""
    return eager_seconds / (COMPILE_HOPE * best_gain) < fastest_seconds


ONE_TOKEN_REPEATS = 7
"""Steps whose median is a variant's eager 1-token step cost (after one to warm up); a compiled step's cost
is the median of the twelve rounds that chose it (:func:`kept_step_seconds`). With 3 steps, the compiled int8
step of a 1B model once read 78.8 ms where those rounds had read 57.5 just before, on this noisy machine, and
calibration left int8 out as not faster than bf16's 82 ms."""


def _one_token_seconds(model: Any, cancelled: Callable[[], bool] | None) -> float:
    return measure_step_seconds(model, (1,), context=128, repeats=ONE_TOKEN_REPEATS, cancelled=cancelled)[0]


def _convert(loaded: LoadedModel, dtype_name: str, quantization: str, layout: str) -> None:
    """Put the model in the dtype, int8 weights and weight layout a cached calibration chose (CPU)."""
    if quantization == "8bit" and loaded.quantization == "none":
        loaded.model, loaded.dtype, loaded.quantization = int8_copy(loaded.model), torch.bfloat16, "8bit"
    dtype = getattr(torch, dtype_name, None)
    widens = dtype == torch.float32 and loaded.dtype != torch.float32  # the loader chose the narrower one to leave memory
    if isinstance(dtype, torch.dtype) and dtype != loaded.dtype and loaded.quantization == "none" and not widens:
        loaded.model = loaded.model.to(dtype)
        loaded.dtype = dtype
    if layout != PLAIN and loaded.device.type == "cpu":
        try:
            apply_layout(loaded.model, layout)
        except RuntimeError as err:  # measured packable here, so not expected; the plain layout still answers
            log.warning("weights stay in the plain layout: %s", err)


def _read(path: Path) -> Calibration | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        learned = {str(k): (float(v[0]), float(v[1])) for k, v in data.get("learned", {}).items()}
        return Calibration.from_dict(data["calibration"], learned)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        log.warning("measuring again: unreadable calibration %s (%s)", path, err)
        return None


def _write(path: Path, loaded: LoadedModel, calibration: Calibration, learned: dict[str, tuple[float, float]]) -> None:
    write_json_atomic(path, {"key": calibration_key(loaded), "calibration": calibration.as_dict(),
                             "learned": {k: list(v) for k, v in learned.items()}})


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({torch.backends.cpu.get_cpu_capability()})"
