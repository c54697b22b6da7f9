"""One benchmark session: the model's variants as Auto's calibration prepares them, the methods to run side by
side on the suites, Auto calibrated as the app calibrates it, and the report (``lookahead-chat bench`` parses
its options and prints what this returns)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from core.autotune.calibration import Calibration
from core.autotune.chooser import AutoChooser
from core.autotune.prepare import PreparedVariants, calibrate_variants
from core.bench.report import Row, report_json, summarize
from core.bench.runner import AUTO, PLAIN_LOOP, REFERENCE, BenchRunner, Method, RunResult
from core.bench.variants import bench_variants, compiled_layers, weight_layouts
from core.engine.ready import model_info
from core.lookahead.config import LookaheadConfig
from core.models.loader import LoadedModel
from core.progress import ProgressCallback, no_progress
from core.suites import Suite

POOLS = {"on": ("prompt",), "off": ("none",), "both": ("prompt", "none")}
"""``--prompt-pool``: what seeds a fixed setting's n-gram pool."""


@dataclass(frozen=True)
class BenchOptions:
    """What to run: ``auto`` (Auto, calibrated first) and ``fixed`` lookahead settings beside the plain loop;
    ``peers``: transformers' ``generate`` (the reference) and prompt lookup too."""

    max_new_tokens: int = 128
    auto: bool = True
    fixed: tuple[LookaheadConfig, ...] = ()
    dtypes: tuple[str, ...] = ()
    repetition_penalty: float = 1.0
    memory: bool = True
    prompt_pool: str = "on"
    conversation_pool: bool = False
    peers: bool = True


@dataclass
class BenchReport:
    """What a session measured: the summary rows, every run, and the settings it ran with (``meta``)."""

    title: str
    rows: list[Row]
    results: list[RunResult]
    meta: dict[str, object] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return report_json(self.rows, self.results, self.meta)


class BenchSession:
    """``loaded``'s variants prepared as the app prepares them (:func:`~core.bench.variants.bench_variants`),
    then (:meth:`calibrate`) Auto calibrated on them as the app calibrates it, then (:meth:`run`) the methods of
    ``options`` side by side."""

    def __init__(self, loaded: LoadedModel, options: BenchOptions) -> None:
        self.loaded, self.options = loaded, options
        self.variants: PreparedVariants = bench_variants(loaded, options.dtypes)
        self.runner = BenchRunner(
            loaded,
            options.max_new_tokens,
            repetition_penalty=options.repetition_penalty,
            models=self.variants.models,
            memory=options.memory,
        )
        self.names = list(self.runner.models)
        self.calibration: Calibration | None = None
        self.calibration_seconds = 0.0
        self.methods: list[Method] = []

    def calibrate(self) -> None:
        """Auto's calibration of the variants (with ``auto``): its chooser then runs Auto's method."""
        if self.options.auto:
            start = time.perf_counter()
            self.calibration = calibrate_variants(self.variants)
            self.calibration_seconds = time.perf_counter() - start
            self.runner.chooser = AutoChooser(self.calibration)

    @property
    def on_blocks(self) -> str:
        """`` (int8 decoder, Q4_K/Q6_K weights)`` where a GGUF file's blocks run as stored, else empty."""
        decoder = model_info(self.loaded).decoder
        return f" (int8 decoder, {decoder} weights)" if decoder else ""

    def variants_line(self) -> str:
        """Each variant's weight layout and compiled layers, in one line."""
        layouts = weight_layouts(self.variants)
        compiled = [name for name, model in self.variants.models.items() if model.compiled is not None]
        layers = ", ".join(f"{name} {compiled_layers(self.variants.models[name])}" for name in compiled)
        return (
            "weight layouts: "
            + ", ".join(f"{name} {layout}" for name, layout in layouts.items())
            + f"; compiled layers: {layers or 'none'}"
        )

    def calibration_line(self) -> str:
        """What Auto's calibration found and runs on, and how long it took (empty without ``auto``)."""
        if self.calibration is None:
            return ""
        return (
            f"{self.calibration.reason}; runs {self.calibration.variant}{self.on_blocks}; "
            f"calibration {self.calibration_seconds:.1f} s"
        )

    def run(self, suites: Sequence[Suite], progress: ProgressCallback = no_progress) -> BenchReport:
        """Every method on every prompt of ``suites``, warmed up first; the report."""
        self.methods = self._methods()
        self.runner.warm_up(self.methods)
        start = time.perf_counter()
        results = self.runner.run(suites, self.methods, progress)
        first = self.names[0]
        rows = summarize(results, REFERENCE + self._tag(first), PLAIN_LOOP + self._tag(first))
        options = self.options
        penalty = f", repetition penalty {options.repetition_penalty}" if options.repetition_penalty != 1.0 else ""
        memory = ", no memory of earlier answers" if not options.memory else ""
        title = (
            f"{self.loaded.name}, {self.loaded.device_info.label}, {'/'.join(self.names)}{self.on_blocks}, "
            f"{torch.get_num_threads()} threads, {options.max_new_tokens} new tokens{penalty}{memory}"
        )
        return BenchReport(title, rows, results, self._meta(suites, time.perf_counter() - start))

    def _tag(self, dtype: str) -> str:
        return f" [{dtype}]" if len(self.names) > 1 else ""

    def _methods(self) -> list[Method]:
        options = self.options
        run_dtype = self.calibration.variant if self.calibration else self.names[0]
        methods: list[Method] = []
        for name in self.names:
            if options.peers:
                methods.append(Method(REFERENCE + self._tag(name), "generate", dtype=name))
            methods.append(Method(PLAIN_LOOP + self._tag(name), "loop", dtype=name))
        if self.calibration is not None:
            methods.append(Method(AUTO + self._tag(run_dtype), AUTO))
        pools = list(POOLS[options.prompt_pool]) + (["message", "conversation"] if options.conversation_pool else [])
        for config in options.fixed:
            for pool in pools:
                suffix = "" if pool == "prompt" else f" {pool} pool" if pool != "none" else " no prompt pool"
                label = f"lookahead {config.label}{suffix}{self._tag(run_dtype)}"
                methods.append(Method(label, "loop", config, pool=pool, dtype=run_dtype))
        if options.peers:
            methods.append(Method(f"prompt lookup {10}{self._tag(run_dtype)}", "prompt_lookup", dtype=run_dtype))
        return methods

    def _meta(self, suites: Sequence[Suite], seconds: float) -> dict[str, object]:
        compiled = [name for name, model in self.variants.models.items() if model.compiled is not None]
        chooser = self.runner.chooser
        return {
            "model": self.loaded.name,
            "device": self.loaded.device_info.label,
            "dtypes": self.names,
            "layouts": weight_layouts(self.variants),
            "compiled": compiled,
            "compiled_layers": {name: compiled_layers(self.variants.models[name]) for name in compiled},
            "threads": torch.get_num_threads(),
            "max_new_tokens": self.options.max_new_tokens,
            "repetition_penalty": self.options.repetition_penalty,
            "memory": "on" if self.options.memory else "off",
            "seconds": seconds,
            "suites": [s.name for s in suites],
            "methods": [m.name for m in self.methods],
            "calibration": self.calibration.as_dict() if self.calibration else None,
            "auto_rates": chooser.rates() if chooser else None,
            "auto_learned": {k: list(v) for k, v in chooser.learned().items()} if chooser else None,
        }
