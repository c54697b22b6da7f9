"""User settings: a validated JSON file in the config dir; a bad file is reported, never fatal."""

from __future__ import annotations

import ipaddress
import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

from core.aside import set_aside_note
from core.atomic import write_json_atomic
from core.lookahead.config import LookaheadConfig
from core.lookahead.sampling import MIN_TEMPERATURE
from core.models.options import LoadOptions, ModelSource
from core.remote import RemoteError, RemoteSource, base_url
from core.remote.target import check_key_env

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
THEMES = ("system", "light", "dark")
MODES = ("auto", "plain", "lookahead")  # auto: the fastest exact decoding measured here (core.autotune.chooser)
MAX_TOP_K = 1000  # the settings dialog's range
MAX_SEED = 2**31 - 1
# About 250,000 tokens of ordinary text (a token is some 4 characters): more than the longest context (128k
# tokens) of the models this app runs, so a longer prompt would not fit; tokenizing this many takes about 2 s.
MAX_SYSTEM_PROMPT = 1_000_000


def check_types(settings: Any) -> None:
    """Raise ValueError when a field of the dataclass ``settings`` holds a value of the wrong type.

    JSON has one number type, so a number field accepts any finite number and is stored as a float;
    whole-number fields refuse fractions, and booleans count as neither.
    """
    for name, hint in get_type_hints(type(settings)).items():
        value = getattr(settings, name)
        if hint is bool and not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false (got {value!r}).")
        if hint in (int, int | None) and not (_is_whole(value) or (value is None and hint is not int)):
            raise ValueError(f"{name} must be a whole number (got {value!r}).")
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a number (got {value!r}).")
            object.__setattr__(settings, name, float(value))
        if hint is str and not isinstance(value, str):
            raise ValueError(f"{name} must be text (got {value!r}).")


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingSettings:
    """Generation controls; ``temperature == 0`` (or below :data:`MIN_TEMPERATURE`) means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.1  # the default model loops on its own phrases without it
    max_new_tokens: int = 512
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_types(self)
        if not isinstance(self.stop_strings, (list, tuple)) or not all(isinstance(x, str) for x in self.stop_strings):
            raise ValueError("stop_strings must be a list of texts.")
        object.__setattr__(self, "stop_strings", tuple(x for x in self.stop_strings if x))
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"temperature must be between 0 and 5 (got {self.temperature}).")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p}).")
        if not 0 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be 0 (off) to {MAX_TOP_K} (got {self.top_k}).")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1) (got {self.min_p}).")
        if not 0.5 <= self.repetition_penalty <= 3.0:
            raise ValueError(f"repetition_penalty must be between 0.5 and 3 (got {self.repetition_penalty}).")
        if not 1 <= self.max_new_tokens <= 32768:
            raise ValueError(f"max_new_tokens must be between 1 and 32768 (got {self.max_new_tokens}).")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be empty (random) or 0 to {MAX_SEED} (got {self.seed}).")

    @property
    def greedy(self) -> bool:
        """Temperature 0, or one so low that sampling would choose as greedy decoding does."""
        return self.temperature < MIN_TEMPERATURE


@dataclass(frozen=True)
class LookaheadSettings:
    """Lookahead mode's W, N, G: ``auto`` takes the best lookahead setting measured on this machine
    (core.autotune.prepare); otherwise the fixed W, N, G."""

    auto: bool = True
    window: int = 7
    ngram: int = 5
    guesses: int = 7

    def __post_init__(self) -> None:
        check_types(self)
        LookaheadConfig(self.window, self.ngram, self.guesses)  # validates the ranges

    @property
    def fixed(self) -> LookaheadConfig:
        return LookaheadConfig(self.window, self.ngram, self.guesses)


@dataclass(frozen=True)
class ServerSettings:
    """The local OpenAI-compatible HTTP server: off by default; loopback only unless ``allow_network``;
    ``api_key`` (empty: none) is required as ``Authorization: Bearer`` when set.

    ``allowed_hosts`` are the names (besides loopback and this machine's addresses) a client may
    reach it by, ``allowed_origins`` the web apps whose pages may call it; both empty by default.
    """

    enabled: bool = False
    port: int = 8765
    api_key: str = ""
    allow_network: bool = False
    max_tokens: int = 4096  # the most tokens one request may ask for
    allowed_hosts: tuple[str, ...] = ()  # e.g. mybox.local
    allowed_origins: tuple[str, ...] = ()  # e.g. http://localhost:3000

    def __post_init__(self) -> None:
        check_types(self)
        if not 1 <= self.port <= 65535:
            raise ValueError(f"the server port must be between 1 and 65535 (got {self.port}).")
        if not 1 <= self.max_tokens <= 32768:
            raise ValueError(f"the server's max tokens must be between 1 and 32768 (got {self.max_tokens}).")
        object.__setattr__(self, "allowed_hosts", _texts(self.allowed_hosts, "allowed_hosts", _host_name))
        object.__setattr__(self, "allowed_origins", _texts(self.allowed_origins, "allowed_origins", _origin))


@dataclass(frozen=True)
class RemoteSettings:
    """The model source "Remote (OpenAI-compatible)": answers come from the server at ``url`` when
    ``enabled``. The API key is never here: it is in the credential store, or in the environment
    variable ``key_env`` names."""

    enabled: bool = False
    url: str = ""
    model: str = ""
    key_env: str = ""

    def __post_init__(self) -> None:
        check_types(self)
        try:
            if self.url.strip():
                object.__setattr__(self, "url", base_url(self.url))
            check_key_env(self.key_env)
            if self.enabled:
                RemoteSource(self.url, self.model, self.key_env)  # a URL and a model are needed
        except RemoteError as err:
            raise ValueError(str(err)) from None

    def source(self) -> RemoteSource | None:
        """The remote source to answer from; None when answers are local."""
        return RemoteSource(self.url, self.model, self.key_env) if self.enabled else None


_HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_")
_TEXTS_LIKE = {
    "allowed_hosts": "a host name like mybox.local or an address like 192.168.1.20 (no http://, no port)",
    "allowed_origins": "an origin like http://localhost:3000 (scheme, host and port; no path)",
}


def _texts(values: Any, name: str, normal: Callable[[str], str | None]) -> tuple[str, ...]:
    """``values`` (a list of texts) in their normal form; a ValueError naming ``name`` for a bad one."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{name} must be a list of texts (got {values!r}).")
    result = []
    for value in values:
        normalized = normal(value) if isinstance(value, str) else None
        if normalized is None:
            raise ValueError(f"{name}: {value!r} is not {_TEXTS_LIKE[name]}.")
        result.append(normalized)
    return tuple(result)


def _host_name(text: str) -> str | None:
    """A host name or address as a ``Host`` header carries it, lowercase, without port or final dot."""
    name = text.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name if name and set(name) <= _HOST_CHARACTERS else None


def _origin(text: str) -> str | None:
    """An origin as a browser sends it (``scheme://host[:port]``, lowercase, no path), or None."""
    parts = urlsplit(text.strip().lower())
    try:
        whole = parts.scheme and parts.netloc and "@" not in parts.netloc and parts.port != 0
    except ValueError:  # a port that is not a number
        return None
    if not whole or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return f"{parts.scheme}://{parts.netloc}"


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
    server: ServerSettings = field(default_factory=ServerSettings)
    remote: RemoteSettings = field(default_factory=RemoteSettings)
    catalog_offered: bool = False  # a first start on the default model offered a catalog model once

    def __post_init__(self) -> None:
        check_types(self)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {self.mode!r}).")
        if self.theme not in THEMES:
            raise ValueError(f"theme must be one of {', '.join(THEMES)} (got {self.theme!r}).")
        if len(self.system_prompt) > MAX_SYSTEM_PROMPT:  # tokenizing it would keep each answer waiting for minutes
            raise ValueError(
                f"the system prompt has {len(self.system_prompt):,} characters; at most {MAX_SYSTEM_PROMPT:,} fit "
                "the context of any model this app runs: shorten it."
            )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        """Build settings from parsed JSON; unknown keys are ignored, bad values raise ValueError."""
        if not isinstance(data, dict):
            raise ValueError("the settings file does not hold a JSON object")
        parts = {
            "source": ModelSource,
            "load": LoadOptions,
            "sampling": SamplingSettings,
            "lookahead": LookaheadSettings,
            "server": ServerSettings,
            "remote": RemoteSettings,
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
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: {err}") from err


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
        """The saved settings; defaults (and a problem message) if the file is missing or invalid.

        An invalid file (unreadable, not JSON, nested too deep, a value of the wrong type or out of
        range) is moved aside under a new name, never overwritten or deleted.
        """
        if not self.path.exists():
            return LoadedSettings(Settings())
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return LoadedSettings(Settings.from_json(data))
        except RecursionError:
            return self._set_aside("it is nested too deeply")
        except (OSError, ValueError) as err:  # JSON and Unicode errors are ValueErrors too
            return self._set_aside(str(err).rstrip("."))

    def _set_aside(self, reason: str) -> LoadedSettings:
        kept = set_aside_note(self.path)
        problem = f"The settings file could not be used ({reason}). Default settings are in effect; {kept}."
        log.warning(problem)
        return LoadedSettings(Settings(), problem)

    def save(self, settings: Settings) -> None:
        """Write the settings atomically (a temp file renamed over the old one)."""
        write_json_atomic(self.path, settings.to_json())


__all__ = [
    "LoadedSettings",
    "LookaheadSettings",
    "RemoteSettings",
    "SamplingSettings",
    "ServerSettings",
    "Settings",
    "SettingsStore",
]
