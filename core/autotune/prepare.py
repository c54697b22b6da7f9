"""Preparing a loaded model for this machine: the fastest variant and step, and Auto's calibration.

Measured once per machine set-up (``core.autotune.store``), then applied again at every load. On
the CPU with dtype ``auto`` it keeps the variant whose plain decoding is fastest here (the model as
loaded, bf16, or with quantization ``auto`` int8 weights where they are clearly faster), each in
its fastest weight layout and with the compiled steps where they measure faster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.autotune.calibration import Calibration, calibrate, calibrate_dtypes
from core.autotune.chooser import AutoChooser
from core.autotune.compile_choice import KeptCompiledStep, choose_compiled_step
from core.autotune.layout import choose_layout
from core.autotune.measure import measure_step_seconds
from core.autotune.store import CalibrationStore, Learned
from core.autotune.variants import auto_chooses_variant, variant_copy, variant_names
from core.models.device import NAME_BY_DTYPE
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import Cancelled, CancelToken, ProgressCallback, no_progress
from core.runtime.compiled.parallel import compile_in_parallel
from core.runtime.compiled.step import compile_step, why_not_compilable
from core.runtime.memory import system_memory
from core.runtime.prepared import PreparedModel
from core.runtime.weights.packed import (
    PACKED,
    PACKED_ROWS,
    PLAIN,
    apply_layout,
    layout_of,
    rows_copy_allowed,
    rows_copy_fits,
)
from core.runtime.weights.variants import int8_copy, variant_bytes

log = logging.getLogger(__name__)

STAGE = "Measuring this machine for Auto (once)"
COMPILE_STAGE = "Loading the compiled decoding step"

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

ONE_TOKEN_REPEATS = 7
"""Steps whose fastest is a variant's eager 1-token step cost (after one to warm up); a compiled step's cost
is the fastest of the twelve rounds that chose it (:class:`~core.autotune.compile_choice.KeptCompiledStep`).
With 3 steps, the compiled int8 step of a 1B model once read 78.8 ms where those rounds had read 57.5 just
before, on this noisy machine, and calibration left int8 out as not faster than bf16's 82 ms."""


@dataclass
class AutoTuning:
    """Auto for one loaded model: what it measured (``None``: nothing, so Auto decodes plain), the chooser
    that runs it and keeps learning across answers, the line that says what Auto runs, and where it is kept."""

    reason: str
    calibration: Calibration | None = None
    chooser: AutoChooser | None = None
    store: CalibrationStore | None = None
    rounding: str = ""  # what rounds differently at each step size (see rounding_by_step_size), "" if nothing

    def save_learned(self) -> None:
        """Keep what the answers measured (tokens per step per setting) for the next start."""
        if self.calibration is None or self.chooser is None or self.store is None:
            return
        learned = self.chooser.learned()
        if learned:
            self.store.add_learned(self.calibration, learned)

    def relearn(self, measured: Learned) -> None:
        """Store tokens per step measured by ``tune``, and predict and choose from them from now on."""
        if self.calibration is None or self.store is None:
            raise ValueError("Auto has not measured this machine yet: load the model without cancelling first.")
        self.store.add_learned(self.calibration, measured)
        self.calibration = self.calibration.with_learned(measured)
        self.chooser = AutoChooser(self.calibration)
        self.reason = auto_reason(self.calibration, self.rounding)


def rounding_by_step_size(loaded: LoadedModel) -> str:
    """What of ``loaded`` may round differently in steps of different sizes ("" for fp32 weights).

    Greedy lookahead is exact in fp32; in bf16, fp16 or quantized weights, a step that feeds several
    tokens runs other kernels than a 1-token step and may round a near tie the other way, so a greedy
    answer depends on the step sizes that produced it. Not where the int8 decoder, whose rows do not
    depend on the step, runs every step (:mod:`~core.runtime.compiled.int8_decoder`).
    """
    compiled = loaded.prepared.compiled
    if compiled is not None and compiled.decoder is not None:
        return ""
    if loaded.quantization != "none":
        return {"8bit": "int8 weights", "4bit": "4-bit weights"}.get(loaded.quantization, loaded.quantization)
    return "" if loaded.dtype == torch.float32 else f"{NAME_BY_DTYPE.get(loaded.dtype, str(loaded.dtype))} weights"


def auto_reason(calibration: Calibration, rounding: str) -> str:
    """The status line: what Auto runs and why, and, where its steps of other sizes round differently and
    it may run them, that the same greedy question may get a slightly different answer another time."""
    if rounding and any(setting is not None for setting in calibration.arms()):
        return (
            f"{calibration.reason}; greedy answers may differ slightly from run to run ({rounding} round "
            "differently in lookahead steps, and Auto's choice of steps follows its measurements)"
        )
    return calibration.reason


def ensure_calibrated(
    loaded: LoadedModel, paths: AppPaths, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> AutoTuning:
    """Prepare ``loaded`` for this machine and calibrate Auto: from the store, or measured now.

    May replace the model with a faster variant (CPU, dtype auto). When cancelled, Auto decodes plain
    until the next load measures again. Raises what the measurement raises.
    """
    store = CalibrationStore.of(paths, loaded)
    cached = store.read()
    if cached is not None:
        calibration = cached
        _apply(loaded, calibration, progress)
    else:
        try:
            calibration = _measure(loaded, progress, cancel)
        except Cancelled:
            log.info("calibration cancelled")
            return AutoTuning("Auto: plain (the measurement was cancelled; it runs again at the next load)")
        store.write(calibration)
        progress(STAGE, 1.0)
    log.info("%s (calibration %.1f s)", calibration.reason, calibration.seconds)
    rounding = rounding_by_step_size(loaded)
    return AutoTuning(auto_reason(calibration, rounding), calibration, AutoChooser(calibration), store, rounding)


def calibrate_or_plain(
    loaded: LoadedModel, paths: AppPaths, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> AutoTuning:
    """:func:`ensure_calibrated` for the window, ``ask`` and ``serve``: a failure leaves Auto decoding plain.

    A model that cannot run the measurement's wide steps (out of memory on a small GPU, say) may
    still answer plainly.
    """
    try:
        return ensure_calibrated(loaded, paths, progress, cancel)
    except Exception as err:  # any failure here must leave the model usable
        log.warning("measuring this machine for Auto failed: %s", err, exc_info=True)
        if loaded.device.type == "cuda":
            torch.cuda.empty_cache()
        return AutoTuning(
            f"Auto: plain (measuring this machine failed: {type(err).__name__}; it is tried again at the next load)"
        )


def _apply(loaded: LoadedModel, calibration: Calibration, progress: ProgressCallback) -> None:
    """Put the model in the dtype, int8 weights, weight layout and compiled step a stored calibration chose."""
    if loaded.weights_as_stored:  # runs as it will from its first step
        return
    _convert(loaded, calibration.dtype, calibration.quantization, calibration.layout)
    if not calibration.compiled and not calibration.compiled_rows:
        return
    progress(COMPILE_STAGE, 0.0)
    compiled = compile_step(loaded.model)  # loads the stored packages (compiles only if they are gone)
    kept = (
        None
        if isinstance(compiled, str)
        else compiled.only(one_token=calibration.compiled, rows=calibration.compiled_rows)
    )
    if kept is None:
        log.warning("the decoding steps stay eager: %s", compiled)
        calibration.compiled = calibration.compiled_rows = False
        if calibration.layout == PACKED_ROWS and not rows_copy_allowed(loaded.model):  # the plain copy
            apply_layout(loaded.model, PACKED)  # was for the compiled step only (fp32): not kept in memory
            calibration.layout = PACKED
    else:
        loaded.run_as(PreparedModel(loaded.model, kept))
    progress(COMPILE_STAGE, 1.0)


def _convert(loaded: LoadedModel, dtype_name: str, quantization: str, layout: str) -> None:
    """Put the model in the dtype, int8 weights and weight layout a cached calibration chose (CPU)."""
    if quantization == "8bit" and loaded.quantization == "none":
        loaded.run_as(PreparedModel(int8_copy(loaded.model)), torch.bfloat16, "8bit")
    dtype = getattr(torch, dtype_name, None)
    widens = (
        dtype == torch.float32 and loaded.dtype != torch.float32
    )  # the loader chose the narrower one to leave memory
    if isinstance(dtype, torch.dtype) and dtype != loaded.dtype and loaded.quantization == "none" and not widens:
        loaded.run_as(PreparedModel(loaded.model.to(dtype)), dtype)
    if layout != PLAIN and loaded.device.type == "cpu":
        try:
            apply_layout(loaded.model, layout)
        except RuntimeError as err:  # measured packable here, so not expected; the plain layout still answers
            log.warning("weights stay in the plain layout: %s", err)


def _measure(loaded: LoadedModel, progress: ProgressCallback, cancel: CancelToken | None) -> Calibration:
    start = time.perf_counter()
    cancelled = (lambda: cancel.cancelled) if cancel is not None else None

    def report(fraction: float) -> None:
        progress(STAGE, min(fraction, 0.99))

    report(0.0)  # the compiles come first: the status bar says what the wait is for at once
    if auto_chooses_variant(loaded):
        calibration = _measure_variants(loaded, report, cancelled)
    elif loaded.weights_as_stored:  # no variant, layout or compiled step to choose: the curve only
        calibration = calibrate(loaded.prepared, progress=report, cancelled=cancelled)
        record_compiled(calibration, loaded.prepared)
    else:
        loaded.run_as(fastest_step(loaded.model, cancelled))
        calibration = calibrate(loaded.prepared, progress=report, cancelled=cancelled)
        calibration.layout = layout_of(loaded.model)
        record_compiled(calibration, loaded.prepared)
    calibration.seconds = time.perf_counter() - start  # copies, weight layouts and curves: all the user waited for
    return calibration


def _measure_variants(
    loaded: LoadedModel, report: Callable[[float], None], cancelled: Callable[[], bool] | None
) -> Calibration:
    """The model as loaded (fp32 or bf16), bf16 and (quantization auto) int8 weights, each in its faster
    layout and step; keep the fastest."""
    copies = variant_copies(loaded)
    try:
        # after the copies are made: packing replaces the float layers
        variants = prepare_variants(copies.models, cancelled, lambda fraction: report(STEPS_SHARE * fraction))
        calibration = calibrate_variants(
            variants, lambda fraction: report(STEPS_SHARE + (1 - STEPS_SHARE) * fraction), cancelled
        )
        int8 = calibration.quantization == "8bit"
        narrower = int8 or calibration.dtype_label == "bf16"
        loaded.run_as(
            variants.models[calibration.variant], torch.bfloat16 if narrower else None, "8bit" if int8 else None
        )
        calibration.untried = copies.untried
        return calibration
    finally:
        copies.models.clear()  # the copies not kept are freed; no gc.collect() here: on this (worker) thread it can
        # destroy Qt objects off the GUI thread, a crash (app/window/gc_guard.py collects on the GUI thread)


@dataclass
class VariantCopies:
    """The model as loaded and its copies (name -> model: ``fp32`` or ``bf16`` first, then ``bf16``,
    ``int8``), and the copies left out because they would not fit in the free memory."""

    models: dict[str, Any]
    untried: tuple[str, ...] = ()


def variant_copies(loaded: LoadedModel) -> VariantCopies:
    """The variants Auto compares on the CPU: the model as loaded, a bf16 copy of an fp32 one, and with
    quantization ``auto`` an int8 one; a copy that would not fit in the free memory is not made."""
    as_loaded, *wanted = variant_names(loaded)
    models = {as_loaded: loaded.model}
    memory = system_memory()
    room = memory.available if memory is not None else None
    untried = []
    for name in wanted:
        needed = int(COPY_MEMORY_MARGIN * variant_bytes(loaded.model, name))
        if room is not None and needed > room:
            log.warning(
                "%s weights not tried: they need %.1f GB, and %.1f GB of memory is free", name, needed / 1e9, room / 1e9
            )
            untried.append(name)
            continue
        models[name] = variant_copy(loaded.model, name)
        room = None if room is None else room - needed
    return VariantCopies(models, tuple(untried))


@dataclass
class PreparedVariants:
    """Each variant in its fastest step (name -> prepared model), and its 1-token step seconds as it now runs."""

    models: dict[str, PreparedModel]
    one_token: dict[str, float] = field(default_factory=dict)


def fastest_step(model: Any, cancelled: Callable[[], bool] | None = None) -> PreparedModel:
    """``model`` in its fastest weight layout, with the compiled steps where they measure faster here (CPU)."""
    choose_layout(model, cancelled)
    return _with_compiled_step(model, cancelled).prepared


@dataclass(frozen=True)
class _Compiled:
    prepared: PreparedModel
    kept: KeptCompiledStep | None


def _with_compiled_step(model: Any, cancelled: Callable[[], bool] | None) -> _Compiled:
    """``model`` (in its layout already) with the compiled steps where they measure faster (CPU).

    Packed weights get a plain copy for the compiled step to read, the wider steps keeping the packed
    ones; the copy stays only if the compiled step does."""
    if model.device.type != "cpu":
        return _Compiled(PreparedModel(model), None)
    rows_copy = _compiles_on_a_rows_copy(model)
    if rows_copy:
        apply_layout(model, PACKED_ROWS)
    kept = choose_compiled_step(model, cancelled)
    if rows_copy and kept is None:
        apply_layout(model, PACKED)
    return _Compiled(PreparedModel(model, kept.step if kept is not None else None), kept)


def _compiles_on_a_rows_copy(model: Any) -> bool:
    """Packed weights whose compiled step is tried on a plain copy of them (``packed+rows``)."""
    return layout_of(model) == PACKED and why_not_compilable(model, weights=False) is None and rows_copy_fits(model)


def prepare_variants(
    models: dict[str, Any],
    cancelled: Callable[[], bool] | None,
    progress: Callable[[float], None] = lambda fraction: None,
    *,
    every_variant: bool = False,
) -> PreparedVariants:
    """Each variant (name -> model) in its fastest step, from the fastest eager step on.

    Unless ``every_variant`` (the bench, which compares them all), a variant whose plain eager step is
    over :data:`LAYOUT_HOPE` times the fastest one keeps the plain layout, and is not compiled (10-14 s
    each) when even :data:`COMPILE_HOPE` times the best compile gain measured so far would leave its
    step slower than the fastest step so far. The two with the fastest eager steps are compiled side by
    side first (:func:`~core.runtime.compiled.parallel.compile_in_parallel`)."""
    eager = {name: _one_token_seconds(model, cancelled) for name, model in models.items()}  # as they come: plain
    progress(0.05)
    fastest_plain = min(eager.values())
    for i, (name, model) in enumerate(models.items()):
        if not every_variant and eager[name] > LAYOUT_HOPE * fastest_plain:
            log.info("%s: no weight layout tried, its eager step (%.1f ms) is too slow", name, 1000 * eager[name])
        elif choose_layout(model, cancelled) != PLAIN:
            eager[name] = _one_token_seconds(model, cancelled)
        progress(0.05 + 0.1 * (i + 1) / len(models))
    order = sorted(eager, key=eager.__getitem__)
    # the first two compiles side by side (most of the wait); packed weights get their plain copy for it, as in
    # _with_compiled_step, which makes it again (cheap) and keeps it only if the compiled step is kept
    first = [models[name] for name in order[:2]]
    packed = [model for model in first if _compiles_on_a_rows_copy(model)]
    for model in packed:
        apply_layout(model, PACKED_ROWS)
    try:
        compile_in_parallel(first, cancelled, lambda fraction: progress(0.15 + 0.7 * fraction))
    finally:
        for model in packed:
            apply_layout(model, PACKED)
    fastest, gain = float("inf"), 1.0
    result = PreparedVariants({name: PreparedModel(model) for name, model in models.items()}, dict(eager))
    for i, name in enumerate(order):
        progress(0.85 + 0.15 * i / len(order))
        if not every_variant and not compiling_may_pay(eager[name], fastest, gain):
            log.info(
                "%s: not compiled, its eager step (%.1f ms) could not overtake %.1f ms",
                name,
                1000 * eager[name],
                1000 * fastest,
            )
            continue
        compiled = _with_compiled_step(models[name], cancelled)
        result.models[name] = compiled.prepared
        if compiled.kept is not None:
            result.one_token[name] = compiled.kept.seconds
        seconds = result.one_token[name]
        gain, fastest = max(gain, eager[name] / seconds), min(fastest, seconds)
    return result


def calibrate_variants(
    variants: PreparedVariants,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Calibration:
    """Auto's calibration of the fastest of the prepared ``variants`` (its name: the result's ``variant``),
    with the weight layout and compiled step it runs on."""
    if len(variants.models) == 1:
        calibration = calibrate(next(iter(variants.models.values())), progress=progress, cancelled=cancelled)
    else:
        calibration = calibrate_dtypes(
            variants.models, progress=progress, cancelled=cancelled, one_token=variants.one_token
        )
    chosen = variants.models[calibration.variant] if len(variants.models) > 1 else next(iter(variants.models.values()))
    calibration.layout = layout_of(chosen.model)
    record_compiled(calibration, chosen)
    return calibration


def record_compiled(calibration: Calibration, model: PreparedModel) -> None:
    """Note in ``calibration`` which compiled layers ``model`` runs, for the next load to apply."""
    step = model.compiled
    calibration.compiled = step is not None and step.one_token is not None
    calibration.compiled_rows = step is not None and (step.rows is not None or step.decoder is not None)


def compiling_may_pay(eager_seconds: float, fastest_seconds: float, best_gain: float) -> bool:
    """Whether a variant's eager step, made :data:`COMPILE_HOPE` times the best compile gain measured
    so far faster, would beat the fastest step so far."""
    return eager_seconds / (COMPILE_HOPE * best_gain) < fastest_seconds


def _one_token_seconds(model: Any, cancelled: Callable[[], bool] | None) -> float:
    return measure_step_seconds(model, (1,), context=128, repeats=ONE_TOKEN_REPEATS, cancelled=cancelled)[0]
