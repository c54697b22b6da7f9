"""User settings: a validated JSON file in the config dir; a bad file is reported, never fatal."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from core.atomic import write_json_atomic
from core.lookahead.config import LookaheadConfig
from core.models.options import LoadOptions, ModelSource

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
THEMES = ("system", "light", "dark")
MODES = ("auto", "plain", "lookahead")  # auto: the fastest exact decoding measured here (core.lookahead.auto)


@dataclass(frozen=True)
class SamplingSettings:
    """Generation controls; ``temperature == 0`` means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.1  # the default model loops on its own phrases without it
    max_new_tokens: int = 512
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.stop_strings, (list, tuple)) or not all(isinstance(x, str) for x in self.stop_strings):
            raise ValueError("stop_strings must be a list of texts.")
        object.__setattr__(self, "stop_strings", tuple(x for x in self.stop_strings if x))
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"temperature must be between 0 and 5 (got {self.temperature}).")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p}).")
        if self.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or more (got {self.top_k}).")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1) (got {self.min_p}).")
        if not 0.5 <= self.repetition_penalty <= 3.0:
            raise ValueError(f"repetition_penalty must be between 0.5 and 3 (got {self.repetition_penalty}).")
        if not 1 <= self.max_new_tokens <= 32768:
            raise ValueError(f"max_new_tokens must be between 1 and 32768 (got {self.max_new_tokens}).")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class LookaheadSettings:
    """Lookahead mode's W, N, G: ``auto`` takes the best lookahead setting measured on this machine
    (core.calibration); otherwise the fixed W, N, G."""

    auto: bool = True
    window: int = 7
    ngram: int = 5
    guesses: int = 7

    def __post_init__(self) -> None:
        LookaheadConfig(self.window, self.ngram, self.guesses)  # validates

    @property
    def fixed(self) -> LookaheadConfig:
        return LookaheadConfig(self.window, self.ngram, self.guesses)


@dataclass(frozen=True)
class Settings:
    """Everything the user can set."""

    source: ModelSource = field(default_factory=ModelSource)
    load: LoadOptions = field(default_factory=LoadOptions)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    mode: str = "auto"
    lookahead: LookaheadSettings = field(default_factory=LookaheadSettings)
    system_prompt: str = "You are a helpful assistant."
    theme: str = "system"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {self.mode!r}).")
        if self.theme not in THEMES:
            raise ValueError(f"theme must be one of {', '.join(THEMES)} (got {self.theme!r}).")
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"system_prompt must be text (got {self.system_prompt!r}).")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Settings":
        """Build settings from parsed JSON; unknown keys are ignored, bad values raise ValueError."""
        if not isinstance(data, dict):
            raise ValueError("the settings file does not hold a JSON object")
        parts = {
            "source": ModelSource,
            "load": LoadOptions,
            "sampling": SamplingSettings,
            "lookahead": LookaheadSettings,
        }
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name in parts:
                kwargs[f.name] = _build(parts[f.name], value, f.name)
            else:
                kwargs[f.name] = value
        try:
            return cls(**kwargs)
        except TypeError as err:
            raise ValueError(str(err)) from err


def _build(kind: type, value: Any, name: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"'{name}' must be an object")
    known = {f.name for f in fields(kind)}
    try:
        return kind(**{k: v for k, v in value.items() if k in known})
    except TypeError as err:
        raise ValueError(f"'{name}': {err}") from err


@dataclass(frozen=True)
class LoadedSettings:
    """Settings and, when the file was unusable, the problem that was reported."""

    settings: Settings
    problem: str | None = None


class SettingsStore:
    """Reads and writes ``settings.json`` in the config dir (atomically)."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / SETTINGS_FILE

    def load(self) -> LoadedSettings:
        """The saved settings; defaults (and a problem message) if the file is missing or invalid."""
        if not self.path.exists():
            return LoadedSettings(Settings())
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return LoadedSettings(Settings.from_json(data))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as err:
            backup = self.path.with_suffix(".invalid.json")
            try:
                os.replace(self.path, backup)
            except OSError:
                backup = self.path
            problem = (
                f"The settings file could not be used ({err}). Default settings are in effect; "
                f"the old file was kept as {backup.name}."
            )
            log.warning(problem)
            return LoadedSettings(Settings(), problem)

    def save(self, settings: Settings) -> None:
        """Write the settings atomically (a temp file renamed over the old one)."""
        write_json_atomic(self.path, settings.to_json())


__all__ = ["LoadedSettings", "LookaheadSettings", "SamplingSettings", "Settings", "SettingsStore"]
