"""Auto: the fastest exact decoding on this machine, measured here, chosen and revised step by step.

Lookahead pays only where a step that feeds many tokens costs little more than a one-token step.
That is a property of the machine (and dtype, model, thread count), so :func:`calibrate` measures
the step cost curve where the model runs (a few seconds), and predicts each setting's speed from it:
``tokens per step / relative cost of its step``. Settings predicted to lose are never run;
:class:`AutoChooser` starts with the best prediction (plain decoding when nothing beats it by a
margin), measures every step it runs, probes the runner-up now and then, and switches when the
measured rates say so. Every setting is exact, so switching never changes the output.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from core.lookahead.config import LookaheadConfig
from core.lookahead.model_step import causal_mask, model_step
from core.lookahead.stats import device_sync

CPU_CURVE_SIZES = (1, 2, 4, 8, 16, 32)
CUDA_CURVE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)

# Tokens per step and tokens fed per step of each setting, greedy on the default model
# (SmolLM2-135M-Instruct, bf16, the tuning suites: 12 prompts with the bench's system prompt, 80 new
# tokens). They are properties of the model and the text, not of the machine: only the starting
# point, replaced by what each answer measures (AutoChooser) and by `tune`.
PRIORS: dict[tuple[int, int, int], tuple[float, float]] = {
    (0, 3, 1): (1.18, 1.9),
    (0, 4, 1): (1.21, 2.3),
    (0, 4, 2): (1.25, 2.8),
    (0, 5, 2): (1.25, 3.5),
    (0, 5, 4): (1.28, 4.2),
    (0, 6, 2): (1.27, 4.0),
    (0, 6, 3): (1.28, 4.6),
    (0, 6, 4): (1.27, 4.9),
    (2, 3, 2): (1.31, 5.7),
    (2, 4, 2): (1.30, 8.3),
    (3, 3, 3): (1.37, 8.2),
    (3, 4, 3): (1.36, 12.1),
    (5, 4, 5): (1.50, 19.1),
    (7, 5, 7): (1.59, 34.5),
    (10, 5, 10): (1.63, 47.8),
    (15, 5, 15): (1.70, 69.7),
}
START_MARGIN = 1.05  # a setting must be predicted this much faster than plain to be tried first
KEEP_RATIO = 0.95  # settings predicted below this fraction of plain's speed are never run
PRIOR_STEPS = 8  # how many measured steps a prediction of tokens per step is worth


@dataclass(frozen=True)
class StepCostCurve:
    """Seconds of one forward pass feeding ``sizes[i]`` new tokens after a few hundred cached ones."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    @classmethod
    def monotone(cls, sizes: Sequence[int], seconds: Sequence[float]) -> "StepCostCurve":
        """A curve from measured medians, made non-decreasing: feeding more tokens is never cheaper, so
        a narrow step measured slower than a wider one was slowed by the machine (another program
        competing), and takes the wider step's time. Lowering, never raising, keeps the relative
        cost of wide steps from being underestimated."""
        fixed = list(seconds)
        for i in range(len(fixed) - 2, -1, -1):
            fixed[i] = min(fixed[i], fixed[i + 1])
        return cls(tuple(sizes), tuple(fixed))

    def cost(self, size: float) -> float:
        """Seconds at ``size`` tokens: linear between measured sizes, extended past the last two."""
        sizes, seconds = self.sizes, self.seconds
        if size <= sizes[0] or len(sizes) == 1:
            return seconds[0]
        for (s0, t0), (s1, t1) in zip(zip(sizes, seconds), zip(sizes[1:], seconds[1:])):
            if size <= s1:
                return t0 + (t1 - t0) * (size - s0) / (s1 - s0)
        (s0, t0), (s1, t1) = (sizes[-2], seconds[-2]), (sizes[-1], seconds[-1])
        return t1 + max(t1 - t0, 0.0) * (size - s1) / (s1 - s0)

    def relative(self, size: float) -> float:
        """Cost at ``size`` tokens over the cost of a one-token step."""
        return self.cost(size) / self.seconds[0]

    def as_dict(self) -> dict[str, list]:
        return {"sizes": list(self.sizes), "seconds": list(self.seconds)}

    @classmethod
    def from_dict(cls, data: dict) -> "StepCostCurve":
        sizes, seconds = tuple(int(s) for s in data["sizes"]), tuple(float(s) for s in data["seconds"])
        if not sizes or len(sizes) != len(seconds) or min(seconds) <= 0:
            raise ValueError("a step cost curve needs matching, positive sizes and seconds")
        return cls(sizes, seconds)


INT8_MARGIN = 1.1  # int8 weights must make the plain step and Auto's expected speed this much faster to be chosen


class Cancelled(Exception):
    """Calibration was cancelled (the app loads another model, or the user pressed Cancel)."""


def measure_step_seconds(
    model: Any,
    sizes: Sequence[int] = CPU_CURVE_SIZES,
    context: int = 256,
    repeats: int = 3,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> list[float]:
    """Median seconds of one forward pass feeding each size after ``context`` cached tokens.

    Steps run through the step implementation the decoder uses and are built as it builds them
    (a 1-token step without a mask, wider ones with a 4D additive mask, only the rows they keep);
    sizes are interleaved within each round so that machine noise hits all alike, and a first
    round warms up and is dropped.
    """
    device = model.device
    dtype = model.get_input_embeddings().weight.dtype
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    step = model_step(model, context + max(sizes) + 1, lookahead=True)
    times: dict[int, list[float]] = {s: [] for s in sizes}
    rounds = repeats + 1
    with torch.inference_mode():
        step.forward(torch.randint(0, vocab, (context,), generator=generator).to(device), torch.arange(context, device=device), 1)
        for r in range(rounds):
            for size in sizes:
                if cancelled is not None and cancelled():
                    raise Cancelled
                ids = torch.randint(0, vocab, (size,), generator=generator).to(device)
                mask = causal_mask(size, context, dtype, device) if size > 1 else None
                positions = torch.arange(context, context + size, device=device)
                keep = torch.arange(min(size, 1 + size // 2), device=device) if size > 1 else 1
                device_sync(device)
                start = time.perf_counter()
                step.forward(ids, positions, keep, mask)
                device_sync(device)
                times[size].append(time.perf_counter() - start)
                step.keep(context - 1, size + 1, [])  # back to ``context`` entries
            if progress is not None:
                progress((r + 1) / rounds)
    return [statistics.median(times[s][1:]) for s in sizes]


@dataclass(frozen=True)
class Estimate:
    """A setting's predicted speed: its tokens per step over the relative cost of its step."""

    setting: LookaheadConfig | None
    tokens_per_step: float
    fed_tokens: float
    speedup: float  # predicted, over plain decoding on the same machine

    @property
    def label(self) -> str:
        return self.setting.label if self.setting is not None else "plain"


def grid(device_type: str) -> list[LookaheadConfig]:
    """The settings Auto considers: verification only (W=0) and lookahead windows up to the paper's."""
    settings = [LookaheadConfig(w, n, g) for (w, n, g) in PRIORS]
    return settings if device_type == "cuda" else [s for s in settings if s.window <= 7]


def predict(curve: StepCostCurve, settings: Sequence[LookaheadConfig], learned: dict[str, tuple[float, float]] | None = None) -> list[Estimate]:
    """Each setting's predicted speed-up over plain, best first; ``learned`` (label -> tokens per step,
    tokens fed) replaces the priors where the model's own answers have measured them."""
    estimates = []
    for s in settings:
        tps, fed = (learned or {}).get(s.label) or PRIORS.get((s.window, s.ngram, s.guesses)) or _rough_prior(s)
        estimates.append(Estimate(s, tps, fed, tps / curve.relative(fed)))
    return sorted(estimates, key=lambda e: -e.speedup)


def _rough_prior(setting: LookaheadConfig) -> tuple[float, float]:
    """For a setting outside the table: a modest acceptance and a nearly full step."""
    return 1.2 + 0.03 * setting.window, 0.8 * setting.max_step_tokens


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
        layout: the float weights' layout for the CPU's kernels (``core.models.cpu_packed``), chosen by the caller's measurement.
        compiled: whether the compiled 1-token step (``core.lookahead.compiled_step``) measured faster and runs.
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
    def reason(self) -> str:
        """One line for the status bar: what Auto runs and why."""
        best = self.estimates[0] if self.estimates else None
        where = "this GPU" if self.device == "cuda" else "this CPU"
        notes = (["int8 weights (faster here; answers may differ slightly)"] if self.quantization == "8bit" else []) + (
            ["compiled 1-token step"] if self.compiled else []) + (
            [f"{' and '.join(self.untried)} not tried (not enough free memory)"] if self.untried else [])
        tail = f"; {', '.join(notes)}" if notes else ""
        if self.choice is None:
            detail = f" (best, {best.label}, expected {best.speedup:.2f}x)" if best else ""
            return f"Auto: plain, lookahead would not be faster on {where}{detail}{tail}"
        return f"Auto: {best.label}, expected {best.speedup:.2f}x plain on {where}{tail}"

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
            "untried": list(self.untried),
            "choice": self.choice.label if self.choice else "plain",
            "reason": self.reason,
            "estimates": [
                {"setting": e.label, "tokens_per_step": e.tokens_per_step, "fed_tokens": e.fed_tokens, "speedup": e.speedup}
                for e in self.estimates
            ],
        }

    def with_learned(self, learned: dict[str, tuple[float, float]]) -> "Calibration":
        """The same curve, predictions redone with tokens per step measured on this model's answers."""
        settings = [e.setting for e in self.estimates if e.setting is not None]
        return Calibration(self.device, self.dtype, self.curve, predict(self.curve, settings, learned), self.seconds,
                           self.dtype_seconds, self.quantization, self.layout, self.compiled)

    @classmethod
    def from_dict(cls, data: dict[str, Any], learned: dict[str, tuple[float, float]] | None = None) -> "Calibration":
        curve = StepCostCurve.from_dict(data["curve"])
        settings = [_parse_label(e["setting"]) for e in data["estimates"] if e["setting"] != "plain"]
        return cls(str(data["device"]), str(data["dtype"]), curve, predict(curve, settings, learned), float(data["seconds"]),
                   {str(k): float(v) for k, v in data.get("dtype_seconds", {}).items()}, str(data.get("quantization", "none")),
                   str(data.get("layout", "plain")), bool(data.get("compiled", False)),
                   tuple(str(name) for name in data.get("untried", [])))


def _parse_label(label: str) -> LookaheadConfig:
    w, n, g = (int(part[1:]) for part in label.split())
    return LookaheadConfig(w, n, g)


def calibrate(
    model: Any,
    *,
    device: torch.device | None = None,
    progress: Callable[[float], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Calibration:
    """Measure the step cost curve of ``model`` where it runs and predict each setting's speed.

    A few seconds on a CPU (the default model: about 2 s here), well under a second on a GPU.
    """
    device = device or model.device
    start = time.perf_counter()
    sizes = CUDA_CURVE_SIZES if device.type == "cuda" else CPU_CURVE_SIZES
    curve = StepCostCurve.monotone(sizes, measure_step_seconds(model, sizes, progress=progress, cancelled=cancelled))
    dtype = str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")
    return Calibration(device.type, dtype, curve, predict(curve, grid(device.type)), time.perf_counter() - start)


def calibrate_dtypes(models: dict[str, Any], progress: Callable[[float], None] | None = None,
                     cancelled: Callable[[], bool] | None = None, one_token: dict[str, float] | None = None) -> Calibration:
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


def _variant_key(model: Any, name: str) -> str:
    """The key :func:`choose_variant` reports a variant's step under: ``int8``, else its dtype."""
    return "int8" if name == "int8" else str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")


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


@dataclass
class _Arm:
    setting: LookaheadConfig | None
    tokens_per_step: float
    fed_tokens: float
    seconds: float  # per step
    observed: int = 0
    streak: int = 0  # steps run in a row, up to now
    last_step: int = 0  # the chooser's step count when it last ran


PROBE_STEPS = 3
"""Steps a probe of a lookahead setting measures (a plain probe measures one)."""

REPROBE_AFTER = 512
"""Steps after which a setting that measured slower is probed again anyway (every arm was predicted
at least KEEP_RATIO of plain, so such a probe costs little)."""


class AutoChooser:
    """Chooses each step's setting from measured rates; keeps learning across the answers it serves.

    Rates are tokens per second per setting: exponential moving averages of what the steps did,
    started from the calibration's predictions. Verification-only settings are also scored on every
    step from the answer itself (``observe_shadow``), so the verification arm runs the best of
    them without probing each. The chooser runs the best rate; every
    ``probe_every`` steps it runs another setting whose rate might beat it for a few steps, and
    the best must lead by ``switch_margin`` before the running setting is changed; a setting that
    fell behind gets another probe after :data:`REPROBE_AFTER` steps. A windowed
    setting that resumes has a stale Jacobi window for its first N-1 steps: they count for its
    step time, not for its tokens per step, and its probes last that much longer.
    """

    def __init__(self, calibration: Calibration, *, probe_every: int = 32, switch_margin: float = 1.04, smoothing: float = 0.15) -> None:
        self.calibration = calibration
        self.probe_every = probe_every
        self.switch_margin = switch_margin
        self.smoothing = smoothing
        unit = calibration.curve.seconds[0]
        predicted = {e.label: e for e in calibration.estimates}
        self._arms: list[_Arm] = []
        for setting in calibration.arms():
            e = predicted.get(setting.label) if setting is not None else None
            tps, fed = (e.tokens_per_step, e.fed_tokens) if e else (1.0, 1.0)
            self._arms.append(_Arm(setting, tps, fed, unit * calibration.curve.relative(fed)))
        self._current = self._arms[0]
        self._last: _Arm | None = None
        self._probe: _Arm | None = None
        self._probe_left = 0
        self._steps = 0
        # Verification-only settings are scored on every step, run or not (shadow_settings): which
        # of them runs as the verification arm follows those scores.
        self._verify = next((a for a in self._arms if a.setting is not None and a.setting.window == 0), None)
        self._shadows: dict[LookaheadConfig, _Arm] = {}
        if self._verify is not None:
            for e in calibration.estimates:
                if e.setting is not None and e.setting.window == 0 and e.speedup >= KEEP_RATIO:
                    self._shadows[e.setting] = _Arm(e.setting, e.tokens_per_step, e.fed_tokens, calibration.curve.relative(e.fed_tokens))

    @property
    def settings(self) -> list[LookaheadConfig | None]:
        """Every setting it may run, and those it scores (the n-gram pool must serve them all)."""
        running = [arm.setting for arm in self._arms]
        return [*running, *(s for s in self._shadows if s not in running)]

    @property
    def shadow_settings(self) -> list[LookaheadConfig]:
        """Verification-only settings to score after every step, from what the step's answer turned out to be."""
        return list(self._shadows)

    def observe_shadow(self, setting: LookaheadConfig, tokens: int, fed: int) -> None:
        """What ``setting`` would have emitted (``tokens``) and fed at a step: greedy verification is
        known exactly once the following tokens are. Picks the verification arm's setting."""
        shadow = self._shadows[setting]
        weight = max(self.smoothing / 2, 1.0 / (shadow.observed + PRIOR_STEPS))
        shadow.tokens_per_step += weight * (tokens - shadow.tokens_per_step)
        shadow.fed_tokens += weight * (fed - shadow.fed_tokens)
        shadow.seconds = self.calibration.curve.relative(shadow.fed_tokens)  # relative cost of its step
        shadow.observed += 1
        arm = self._verify
        assert arm is not None
        best = max(self._shadows.values(), key=_rate)
        running = self._shadows.get(arm.setting)
        if best.setting != arm.setting and (running is None or _rate(best) > self.switch_margin * _rate(running)):
            if running is not None:  # its measured step time, scaled to the new step size
                arm.seconds *= best.seconds / running.seconds
            arm.setting, arm.tokens_per_step, arm.fed_tokens = best.setting, best.tokens_per_step, best.fed_tokens

    def rates(self) -> dict[str, float]:
        """Estimated tokens per second of every setting, as now believed."""
        return {_label(a.setting): a.tokens_per_step / a.seconds for a in self._arms}

    def learned(self, min_steps: int = 24) -> dict[str, tuple[float, float]]:
        """Tokens per step and tokens fed, measured (or scored) over at least ``min_steps`` steps, per non-plain setting."""
        found = {a.setting.label: (a.tokens_per_step, a.fed_tokens) for a in self._shadows.values() if a.observed >= min_steps}
        found.update({a.setting.label: (a.tokens_per_step, a.fed_tokens) for a in self._arms
                      if a.setting is not None and a.setting.window > 0 and a.observed >= min_steps})
        return found

    def choose(self) -> LookaheadConfig | None:
        self._steps += 1
        if self._probe_left > 0 and self._probe is not None:
            self._probe_left -= 1
            return self._probe.setting
        if self._steps % self.probe_every == 0:
            rival = self._rival()
            if rival is not None:
                self._probe = rival
                self._probe_left = _probe_length(rival.setting) - 1
                return rival.setting
        return self._current.setting

    def observe(self, setting: LookaheadConfig | None, tokens: int, seconds: float, fed: int) -> None:
        arm = next((a for a in self._arms if a.setting == setting), None)
        if arm is None:  # a verification setting the verification arm has since left
            arm = self._verify
            assert arm is not None and setting is not None and setting.window == 0
        # Step times are reliable from the first step; acceptance varies a lot from step to step, so
        # the prediction counts as PRIOR_STEPS observed steps before the answers' own take over.
        arm.streak = arm.streak + 1 if arm is self._last else 1
        arm.last_step = self._steps
        self._last = arm
        arm.seconds += max(self.smoothing, 1.0 / (arm.observed + 2)) * (seconds - arm.seconds)
        if arm.streak > _refill_steps(setting):
            weight = max(self.smoothing / 2, 1.0 / (arm.observed + PRIOR_STEPS))
            arm.tokens_per_step += weight * (tokens - arm.tokens_per_step)
            arm.fed_tokens += weight * (fed - arm.fed_tokens)
            arm.observed += 1
        best = max(self._arms, key=_rate)
        if best is not self._current and _rate(best) > self.switch_margin * _rate(self._current):
            self._current = best
            self._probe_left = 0

    def _rival(self) -> _Arm | None:
        """The setting to probe: the best-rated one other than the current, if it could plausibly win."""
        others = [a for a in self._arms if a is not self._current]
        if not others:
            return None
        rival = max(others, key=_rate)
        if _rate(rival) >= KEEP_RATIO * _rate(self._current):
            return rival
        # What measured slower once may win on other text (code after chat): each gets another look now and then.
        stale = min(others, key=lambda a: a.last_step)
        return stale if self._steps - stale.last_step >= REPROBE_AFTER else None


def _rate(arm: _Arm) -> float:
    return arm.tokens_per_step / arm.seconds


def _label(setting: LookaheadConfig | None) -> str:
    return setting.label if setting is not None else "plain"


def _refill_steps(setting: LookaheadConfig | None) -> int:
    """Steps a setting runs on a stale Jacobi window after it resumes: N-1 for a windowed one."""
    return setting.ngram - 1 if setting is not None and setting.window else 0


def _probe_length(setting: LookaheadConfig | None) -> int:
    """A probe measures a few steps, after any refill of the window."""
    return _refill_steps(setting) + (PROBE_STEPS if setting is not None else 1)
