"""Named sampling presets: a few built in, the user's own saved atomically in ``presets.json``.

A file that cannot be used is moved aside (never overwritten or deleted) and the built-in presets
stay available, as for the settings file. A file with some bad entries loads the others: the file
as it was is moved aside, and the presets that loaded are written back.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.aside import move_aside, set_aside_note
from core.atomic import write_json_atomic
from core.settings import SamplingSettings, Settings

log = logging.getLogger(__name__)

PRESETS_FILE = "presets.json"
MAX_NAME = 60


@dataclass(frozen=True)
class Preset:
    """A name for a set of sampling settings."""

    name: str
    sampling: SamplingSettings
    builtin: bool = False


BUILTIN: tuple[Preset, ...] = (
    Preset("Precise", SamplingSettings(temperature=0.0, repetition_penalty=1.1), builtin=True),
    Preset("Balanced", SamplingSettings(temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.1), builtin=True),
    Preset(
        "Creative", SamplingSettings(temperature=1.0, top_p=0.95, min_p=0.05, repetition_penalty=1.05), builtin=True
    ),
)


def check_name(name: Any) -> str:
    """``name`` stripped; raises ValueError when it is empty, too long or a built-in preset's name."""
    name = name.strip() if isinstance(name, str) else name
    if not isinstance(name, str) or not name:
        raise ValueError("A preset needs a name.")
    if len(name) > MAX_NAME:
        raise ValueError(f"A preset name can have at most {MAX_NAME} characters.")
    if any(p.name.casefold() == name.casefold() for p in BUILTIN):
        raise ValueError(f"“{name}” is a built-in preset; choose another name.")
    return name


def saved(user: tuple[Preset, ...], name: str, sampling: SamplingSettings) -> tuple[Preset, ...]:
    """``user`` with ``sampling`` saved as ``name`` (replacing a preset of that name, in its place)."""
    name = check_name(name)
    new = Preset(name, sampling)
    if any(p.name.casefold() == name.casefold() for p in user):
        return tuple(new if p.name.casefold() == name.casefold() else p for p in user)
    return (*user, new)


def matching(presets: tuple[Preset, ...], sampling: SamplingSettings) -> Preset | None:
    """The first preset whose settings are exactly ``sampling``."""
    return next((p for p in presets if p.sampling == sampling), None)


@dataclass(frozen=True)
class LoadedPresets:
    """The user's presets and, when the file was unusable, the problem that was reported."""

    user: tuple[Preset, ...] = ()
    problem: str | None = None


class PresetStore:
    """Reads and writes the user's presets in the config dir; the built-in ones are never written."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / PRESETS_FILE

    def load(self) -> LoadedPresets:
        """The saved presets; none (and a problem message) when the file is invalid, which is moved aside.

        Entries that cannot be used are left out, named in the problem message, and kept in the file
        as it was, which is moved aside (see :meth:`_left_out`).
        """
        if not self.path.exists():
            return LoadedPresets()
        try:
            user, dropped = _from_json(json.loads(self.path.read_text(encoding="utf-8")))
        except RecursionError:
            return self._set_aside("it is nested too deeply")
        except (OSError, ValueError) as err:  # JSON and Unicode errors are ValueErrors too
            return self._set_aside(str(err).rstrip("."))
        return LoadedPresets(user, self._left_out(user, dropped) if dropped else None)

    def save(self, user: tuple[Preset, ...]) -> None:
        """Write the user's presets atomically (a temp file renamed over the old one)."""
        write_json_atomic(self.path, {"presets": [{"name": p.name, "sampling": asdict(p.sampling)} for p in user]})

    def _left_out(self, user: tuple[Preset, ...], dropped: list[str]) -> str:
        """Move the file as it was aside and write ``user`` back: the bad entries are kept, not lost at the
        next save, and not reported again at the next start. Returns the problem message."""
        verb = "was" if len(dropped) == 1 else "were"
        problem = f"Part of the sampling presets file could not be used: {'; '.join(dropped)} {verb} left out"
        problem += "; the other presets loaded." if user else "."
        try:
            aside = move_aside(self.path, "invalid")
        except OSError as err:
            problem += f" The file could not be moved aside ({err.strerror or err}) and stays as it is."
        else:
            problem += f" The file as it was is kept as {aside.name}."
            try:
                self.save(user)
            except OSError as err:
                problem += f" The presets that loaded could not be written back ({err.strerror or err})."
        log.warning(problem)
        return problem

    def _set_aside(self, reason: str) -> LoadedPresets:
        kept = set_aside_note(self.path)
        problem = f"The sampling presets file could not be used ({reason}). The built-in presets are available; {kept}."
        log.warning(problem)
        return LoadedPresets((), problem)


def _from_json(data: Any) -> tuple[tuple[Preset, ...], list[str]]:
    """The presets in ``data``, and each entry that could not be used: its name (or number) and why."""
    if not isinstance(data, dict) or not isinstance(data.get("presets"), list):
        raise ValueError('the file does not hold an object with a "presets" list')
    presets: list[Preset] = []
    dropped: list[str] = []
    for number, entry in enumerate(data["presets"], 1):
        try:
            presets.append(_preset(entry, presets))
        except ValueError as err:
            name = entry.get("name") if isinstance(entry, dict) else None
            label = f"“{name.strip()}”" if isinstance(name, str) and name.strip() else f"preset {number}"
            dropped.append(f"{label} ({str(err).rstrip('.')})")
    return tuple(presets), dropped


def _preset(entry: Any, earlier: list[Preset]) -> Preset:
    if not isinstance(entry, dict):
        raise ValueError("it is not an object")
    name = check_name(entry.get("name"))
    if any(p.name.casefold() == name.casefold() for p in earlier):
        raise ValueError(f"two presets are named “{name}”")
    return Preset(name, Settings.from_json({"sampling": entry.get("sampling")}).sampling)
