"""Auto's calibration: the step cost curve measured here and each setting's predicted speed, for one
model variant or the fastest of several (dtypes, int8 weights).

Lookahead pays only where a step that feeds many tokens costs little more than a one-token step.
That is a property of the machine (and dtype, model, thread count), so :func:`calibrate` measures
the step cost curve where the model runs (a few seconds), and predicts each setting's speed from it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from core.autotune.curve import StepCostCurve
from core.autotune.measure import CPU_CURVE_SIZES, CUDA_CURVE_SIZES, measure_step_seconds
from core.autotune.predict import KEEP_RATIO, START_MARGIN, Estimate, grid, predict
from core.lookahead.config import LookaheadConfig
from core.runtime.prepared import PreparedModel, prepared

INT8_MARGIN = 1.1  # int8 weights must make the plain step and Auto's expected speed this much faster to be chosen


@dataclass
class Calibration:
    """What Auto measured on this machine and what it will run.

    Attributes:
        device: ``cpu`` or ``cuda``.
        dtype: the model's dtype when measured.
        curve: the step cost curve.
        estimates: every considered setting's prediction, best first.
        seconds: how long calibration took.
        dtype_seconds: the one-token step cost per dtype tried (CPU with dtype auto), else empty.
        quantization: ``8bit`` when the caller chose int8 weights because they were faster, else ``none``.
        layout: the float weights' layout for the CPU's kernels (``core.runtime.weights.packed``), chosen by the caller's measurement.
        compiled: whether the compiled 1-token layer (``core.runtime.compiled.step``) measured faster and runs 1-token steps.
        compiled_rows: whether the compiled rows layer measured faster and runs wider steps (and 1-token
            steps, where the 1-token layer does not).
        untried: the variants (``bf16``, ``int8``) the caller left out because their copies would not fit in the free memory.
    """

    device: str
    dtype: str
    curve: StepCostCurve
    estimates: list[Estimate]
    seconds: float
    dtype_seconds: dict[str, float] = field(default_factory=dict)
    quantization: str = "none"
    layout: str = "plain"
    compiled: bool = False
    untried: tuple[str, ...] = ()
    compiled_rows: bool = False

    @property
    def dtype_label(self) -> str:
        """The dtype as settings name it: ``fp32``, ``bf16``, ``fp16``."""
        return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(self.dtype, self.dtype)

    @property
    def variant(self) -> str:
        """The model variant it measured, as the bench names them: ``int8`` for int8 weights, else the dtype label."""
        return "int8" if self.quantization == "8bit" else self.dtype_label

    @property
    def choice(self) -> LookaheadConfig | None:
        """The setting Auto starts with: the best prediction, or ``None`` (plain) if none wins by a margin."""
        best = self.estimates[0] if self.estimates else None
        return best.setting if best is not None and best.speedup >= START_MARGIN else None

    @property
    def expected_rate(self) -> float:
        """Tokens per second Auto expects to start with: its choice's predicted speed, or plain's."""
        speedup = self.estimates[0].speedup if self.choice is not None else 1.0
        return speedup / self.curve.seconds[0]

    @property
    def best_lookahead(self) -> LookaheadConfig:
        """The best predicted setting with a Jacobi window (lookahead mode with Auto parameters)."""
        windowed = [e for e in self.estimates if e.setting is not None and e.setting.window > 0]
        return windowed[0].setting if windowed else LookaheadConfig(5, 4, 5)

    def arms(self) -> list[LookaheadConfig | None]:
        """What the chooser may run: its first choice, plain, and the best verification-only and the best
        windowed setting where they might win once measured (settings of one kind differ little)."""
        hopeful = [e.setting for e in self.estimates if e.speedup >= KEEP_RATIO]
        best_of_kind = [next((s for s in hopeful if (s.window > 0) == windowed), None) for windowed in (False, True)]
        choice = self.choice
        arms: list[LookaheadConfig | None] = [choice] if choice is None else [choice, None]
        arms += [s for s in best_of_kind if s is not None and s != choice]
        return arms

    @property
    def compiled_label(self) -> str:
        """Which steps run compiled: ``compiled 1-token step``, ``compiled steps``, or ``eager steps``."""
        if self.compiled_rows:
            return "compiled steps"
        return "compiled 1-token step" if self.compiled else "eager steps"

    @property
    def reason(self) -> str:
        """One line for the status bar: what Auto runs and why."""
        best = self.estimates[0] if self.estimates else None
        where = "this GPU" if self.device == "cuda" else "this CPU"
        notes = (
            (["int8 weights (faster here; answers may differ slightly)"] if self.quantization == "8bit" else [])
            + ([self.compiled_label] if self.compiled or self.compiled_rows else [])
            + ([f"{' and '.join(self.untried)} not tried (not enough free memory)"] if self.untried else [])
        )
        tail = f"; {', '.join(notes)}" if notes else ""
        curve = self.curve.summary()  # why: how much a wider step costs here
        if self.choice is None:
            details = ([f"best, {best.label}, expected {best.speedup:.2f}x"] if best else []) + (
                [curve] if curve else []
            )
            detail = f" ({'; '.join(details)})" if details else ""
            return f"Auto: plain, lookahead would not be faster on {where}{detail}{tail}"
        return (
            f"Auto: {best.label}, expected {best.speedup:.2f}x plain on {where}{f' ({curve})' if curve else ''}{tail}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "curve": self.curve.as_dict(),
            "seconds": self.seconds,
            "dtype_seconds": dict(self.dtype_seconds),
            "quantization": self.quantization,
            "layout": self.layout,
            "compiled": self.compiled,
            "compiled_rows": self.compiled_rows,
            "untried": list(self.untried),
            "choice": self.choice.label if self.choice else "plain",
            "reason": self.reason,
            "estimates": [
                {
                    "setting": e.label,
                    "tokens_per_step": e.tokens_per_step,
                    "fed_tokens": e.fed_tokens,
                    "speedup": e.speedup,
                }
                for e in self.estimates
            ],
        }

    def with_learned(self, learned: dict[str, tuple[float, float]]) -> Calibration:
        """The same curve, predictions redone with tokens per step measured on this model's answers."""
        settings = [e.setting for e in self.estimates if e.setting is not None]
        return dataclasses.replace(self, estimates=predict(self.curve, settings, learned))

    @classmethod
    def from_dict(cls, data: dict[str, Any], learned: dict[str, tuple[float, float]] | None = None) -> Calibration:
        curve = StepCostCurve.from_dict(data["curve"])
        settings = [LookaheadConfig.from_label(e["setting"]) for e in data["estimates"] if e["setting"] != "plain"]
        return cls(
            str(data["device"]),
            str(data["dtype"]),
            curve,
            predict(curve, settings, learned),
            float(data["seconds"]),
            {str(k): float(v) for k, v in data.get("dtype_seconds", {}).items()},
            str(data.get("quantization", "none")),
            str(data.get("layout", "plain")),
            bool(data.get("compiled", False)),
            tuple(str(name) for name in data.get("untried", [])),
            bool(data.get("compiled_rows", False)),
        )


def calibrate(
    model: PreparedModel | Any,
    *,
    device: torch.device | None = None,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Calibration:
    """Measure the step cost curve of ``model`` where it runs and predict each setting's speed.

    A few seconds on a CPU (the default model: about 2 s here), well under a second on a GPU.
    ``model``: a transformers causal LM or a :class:`~core.runtime.prepared.PreparedModel`.
    """
    model = prepared(model)
    device = device or model.device
    start = time.perf_counter()
    sizes = CUDA_CURVE_SIZES if device.type == "cuda" else CPU_CURVE_SIZES
    curve = StepCostCurve.monotone(sizes, measure_step_seconds(model, sizes, progress=progress, cancelled=cancelled))
    dtype = str(model.dtype).removeprefix("torch.")
    return Calibration(device.type, dtype, curve, predict(curve, grid(device.type)), time.perf_counter() - start)


def calibrate_dtypes(
    models: dict[str, PreparedModel],
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    one_token: dict[str, float] | None = None,
) -> Calibration:
    """Calibrate the same model in several variants (name -> model) and keep one (:func:`choose_variant`).

    ``one_token`` (name -> seconds of a 1-token step, measured already) picks the float variant at
    once, and spares the curves of the variants that could not be kept (:func:`may_be_chosen`); the
    result's ``dtype_seconds`` then reports those steps."""
    start = time.perf_counter()
    kept = set(models) if one_token is None else may_be_chosen(one_token)
    measured = [name for name in models if name in kept]
    results: dict[str, Calibration] = {}
    for i, name in enumerate(measured):
        part = (lambda f, i=i: progress((i + f) / len(measured))) if progress is not None else None
        results[name] = calibrate(models[name], progress=part, cancelled=cancelled)
    chosen = choose_variant(results)
    if one_token is not None:
        chosen.dtype_seconds = {_variant_key(models[name], name): seconds for name, seconds in one_token.items()}
    chosen.seconds = time.perf_counter() - start
    return chosen


def may_be_chosen(one_token: dict[str, float]) -> set[str]:
    """The variants (name -> 1-token step seconds) that :func:`choose_variant` might keep: the float
    one with the cheapest step, and ``int8`` where its step is :data:`INT8_MARGIN` cheaper still."""
    floats = {name: s for name, s in one_token.items() if name != "int8"}
    cheapest = min(floats, key=floats.__getitem__)
    plainly_faster = "int8" in one_token and one_token["int8"] * INT8_MARGIN <= floats[cheapest]
    return {cheapest, "int8"} if plainly_faster else {cheapest}


def _variant_key(model: PreparedModel, name: str) -> str:
    """The key :func:`choose_variant` reports a variant's step under: ``int8``, else its dtype."""
    return "int8" if name == "int8" else str(model.dtype).removeprefix("torch.")


def choose_variant(results: dict[str, Calibration]) -> Calibration:
    """The float dtype whose plain step is fastest, or int8 weights where they are clearly faster.

    An entry named ``int8`` (int8 weights: answers change slightly) is kept only when both its
    plain step and Auto's expected speed on it (:attr:`Calibration.expected_rate`) beat the chosen
    float one's by :data:`INT8_MARGIN`: int8 steps are cheap for one token but grow fast with the
    tokens fed, so a cheaper plain step alone does not make Auto faster, and Auto's expected speed
    rests on predicted tokens per step, so it alone must not trade the answers' precision either.
    The result's ``dtype_seconds`` holds every entry's one-token step cost (int8's under ``int8``).
    """
    floats = {name: c for name, c in results.items() if name != "int8"}
    chosen = min(floats.values(), key=lambda c: c.curve.seconds[0])
    seconds = {c.dtype: c.curve.seconds[0] for c in floats.values()}
    int8 = results.get("int8")
    if int8 is not None:
        seconds["int8"] = int8.curve.seconds[0]
        plainly_faster = int8.curve.seconds[0] * INT8_MARGIN <= chosen.curve.seconds[0]
        if plainly_faster and int8.expected_rate >= INT8_MARGIN * chosen.expected_rate:
            chosen, chosen.quantization = int8, "8bit"
    chosen.dtype_seconds = seconds
    return chosen
