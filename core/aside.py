"""Set an unusable file aside under a new, dated name: never overwritten, never deleted."""

from __future__ import annotations

import os
import time
from pathlib import Path


def move_aside(path: Path, tag: str, companions: tuple[str, ...] = ()) -> Path:
    """Rename ``path`` to ``<stem>.<tag>-<YYYYmmdd-HHMMSS>[-n]<suffix>`` beside it; returns the new path.

    ``companions`` are suffixes of files that belong to ``path`` (such as SQLite's ``-wal``); each
    that exists moves along under the new name plus its suffix. Raises OSError when the move fails.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        target = path.with_name(f"{path.stem}.{tag}-{stamp}{'' if n == 1 else f'-{n}'}{path.suffix}")
        taken = [target, *(Path(f"{target}{c}") for c in companions)]
        if not any(os.path.lexists(t) for t in taken):
            break
    else:
        raise FileExistsError(f"no free name to set {path.name} aside")
    os.rename(path, target)
    for suffix in companions:
        extra = Path(f"{path}{suffix}")
        if extra.exists():
            os.rename(extra, f"{target}{suffix}")
    return target


def set_aside_note(path: Path) -> str:
    """Move an unusable file aside (tag ``invalid``) and say where it went, or why it stayed."""
    try:
        return f"the old file was kept as {move_aside(path, 'invalid').name}"
    except OSError as err:
        return f"the old file could not be moved aside ({err.strerror or err}) and stays where it is"
