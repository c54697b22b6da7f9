"""A model ready to answer: loaded, prepared for this machine, with Auto and the conversations' n-gram pools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from core.autotune.prepare import AutoTuning, calibrate_or_plain
from core.autotune.store import CalibrationStore
from core.chat.pools import ConversationPools
from core.engine.background import MEASURING_REASON, BackgroundCalibration, Upgrade, compiled_step_missing
from core.lookahead import AnswerMemory
from core.models.device import NAME_BY_DTYPE
from core.models.loader import LoadedModel
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback, no_progress


@dataclass(frozen=True)
class ModelInfo:
    """The loaded model as the front doors show it."""

    name: str
    device_label: str
    device_kind: str
    dtype: str
    quantization: str
    context_length: int
    parameters: int
    load_seconds: float
    auto_reason: str = ""  # what Auto runs on this machine and why
    decoder: str = ""  # where our int8 decoder runs the steps: its weights' formats, e.g. ``Q4_K/Q6_K``

    @property
    def precision(self) -> str:
        """What the steps run on: the int8 decoder and its weights (``int8 decoder, Q4_K/Q6_K weights``), or the
        dtype and quantization, e.g. ``bf16`` or ``fp16 4bit``."""
        if self.decoder:
            return f"int8 decoder, {self.decoder} weights"
        return self.dtype if self.quantization in ("none", "") else f"{self.dtype} {self.quantization}"


@dataclass
class ReadyModel:
    """What every job of a model thread runs with; ``background``: the calibration still to run (not started),
    or running, whose :class:`~core.engine.background.Upgrade` the model thread applies between jobs."""

    loaded: LoadedModel
    auto: AutoTuning
    pools: ConversationPools
    background: BackgroundCalibration | None = None
    memory: AnswerMemory = field(default_factory=AnswerMemory)  # this model's answers (model thread only)
    compare_warmed: bool = False  # a comparison has run both modes briefly on this model (first-call costs)

    def remember(self, answers: Sequence[str]) -> None:
        """Add earlier answers (saved chats, oldest first) to the model's memory, as its tokenizer splits them."""
        tokenizer = self.loaded.tokenizer
        for text in answers:
            self.memory.add(tokenizer(text, add_special_tokens=False)["input_ids"])

    def upgrade(self, upgrade: Upgrade) -> None:
        """Answer from now on with what the background work prepared (model thread, between jobs)."""
        if upgrade.loaded is not None:
            prepared = upgrade.loaded
            self.loaded.run_as(prepared.prepared, prepared.dtype, prepared.quantization)
        self.auto, self.background = upgrade.auto, None

    @property
    def info(self) -> ModelInfo:
        return model_info(self.loaded, self.auto.reason)


def model_info(loaded: LoadedModel, auto_reason: str = "") -> ModelInfo:
    """``loaded`` as the front doors show it (and the bench's tables name what ran)."""
    compiled = loaded.prepared.compiled
    return ModelInfo(
        loaded.name,
        loaded.device_info.label,
        loaded.device_info.kind,
        NAME_BY_DTYPE.get(loaded.dtype, str(loaded.dtype)),
        loaded.quantization,
        loaded.context_length,
        loaded.parameters,
        loaded.load_seconds,
        auto_reason,
        "/".join(compiled.decoder.formats) if compiled is not None and compiled.decoder is not None else "",
    )


def make_ready(
    loaded: LoadedModel,
    paths: AppPaths,
    pools: ConversationPools | None = None,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    background: bool = False,
) -> ReadyModel:
    """Prepare ``loaded`` for this machine and Auto (a failure or Cancel leaves Auto decoding plain).

    A calibration stored for this machine set-up is applied now (milliseconds, and loading the
    compiled step). Without one (or without its compiled step in the cache), ``background`` answers at
    once, eagerly and plainly, and leaves the work to the returned model's ``background`` (the caller
    starts it); else it is measured now. Weights as stored (a GGUF file's, in the int8 decoder) are measured
    now in any case: their curve takes seconds, and then the first answer runs Auto as the bench measures it.
    """
    pools = pools if pools is not None else ConversationPools()
    stored = CalibrationStore.of(paths, loaded).read() if background and not loaded.weights_as_stored else None
    if background and not loaded.weights_as_stored and (stored is None or compiled_step_missing(loaded, stored, paths)):
        return ReadyModel(loaded, AutoTuning(MEASURING_REASON), pools, BackgroundCalibration(loaded, paths))
    return ReadyModel(loaded, calibrate_or_plain(loaded, paths, progress, cancel), pools)
