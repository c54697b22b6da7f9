"""What the GUI asks of the model worker and what it gets back (plain data, no Qt)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from core.chat.prompt import Message
from core.lookahead.stats import DecodeStats
from core.progress import CancelToken
from core.settings import LookaheadSettings, SamplingSettings


@dataclass(frozen=True)
class ModelInfo:
    """The loaded model as the window shows it."""

    name: str
    device_label: str
    device_kind: str
    dtype: str
    quantization: str
    context_length: int
    parameters: int
    load_seconds: float
    auto_reason: str = ""  # what Auto runs on this machine and why

    @property
    def precision(self) -> str:
        """dtype and quantization, e.g. ``bf16`` or ``fp16 4bit``."""
        return self.dtype if self.quantization in ("none", "") else f"{self.dtype} {self.quantization}"


@dataclass(frozen=True)
class AnswerRequest:
    """One answer to generate for a conversation."""

    conversation_id: int
    messages: tuple[Message, ...]
    mode: str  # "auto", "plain" or "lookahead"
    lookahead: LookaheadSettings
    sampling: SamplingSettings
    cancel: CancelToken


@dataclass(frozen=True)
class AnswerStart:
    """Sent once the prompt is built: the mode used, how much of the context it takes, and a note
    when the prompt needed a fallback (e.g. a template without a system role)."""

    mode: str  # "plain" or "lookahead W4 N4 G4"
    prompt_tokens: int
    dropped_messages: int
    context_length: int
    note: str = ""


@dataclass(frozen=True)
class AnswerFigures:
    """Speed figures of an answer (live while it streams, final when it ends)."""

    mode: str
    new_tokens: int = 0
    steps: int = 0
    tokens_per_second: float = 0.0
    tokens_per_step: float = 0.0
    prompt_tokens: int = 0
    time_to_first_token: float = 0.0
    seconds: float = 0.0

    @classmethod
    def from_stats(cls, mode: str, stats: DecodeStats) -> "AnswerFigures":
        return cls(
            mode,
            stats.new_tokens,
            stats.steps,
            stats.tokens_per_second,
            stats.tokens_per_step,
            stats.prompt_tokens,
            stats.time_to_first_token,
            stats.total_seconds,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, mode: str | None) -> "AnswerFigures | None":
        if not data:
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "mode"}
        return cls(mode or str(data.get("mode", "")), **known)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The line under an answer: ``38.2 tok/s · 1.9 tokens/step · lookahead W7 N5 G7 · 212 tokens``."""
        return (
            f"{self.tokens_per_second:.1f} tok/s · {self.tokens_per_step:.2f} tokens/step · "
            f"{self.mode} · {self.new_tokens} tokens"
        )


@dataclass(frozen=True)
class AnswerOutcome:
    """How an answer ended: ``finish_reason`` is eos, length, stop, cancelled or error."""

    text: str
    finish_reason: str
    figures: AnswerFigures | None
    error: str | None = None
    device_label: str | None = None
