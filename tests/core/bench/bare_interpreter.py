"""A bare interpreter for tests: only torch, transformers, safetensors and what they themselves require.

The venv's packages of those distributions are linked into one folder; the interpreter runs with
``-S`` (no site-packages) and that folder plus the source checkout on ``PYTHONPATH``. So PySide6,
qasync, gguf, platformdirs, bitsandbytes and accelerate cannot be imported, as on a bare GPU machine.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOTS = ("torch", "transformers", "safetensors")
REPO = Path(__file__).resolve().parents[3]


def dependency_closure(roots: tuple[str, ...] = ROOTS) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, without optional extras."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def build(folder: Path) -> Path:
    """Link the closure's top-level modules and metadata into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in dependency_closure():
        site = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source, link = site / top, folder / top
            if source.exists() and not link.exists() and top != "__pycache__":
                link.symlink_to(source)
    return folder


def command(folder: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run ``python -S args...`` in the bare interpreter from the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(
        PYTHONPATH=f"{REPO}{os.pathsep}{folder}", PYTHONNOUSERSITE="1", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1")
    )
    return [sys.executable, "-S", *args], env
