"""Before Qt starts on Linux/X11: name the system libraries its xcb plugin needs that are missing.

Without them Qt prints a long plugin error and aborts; a fresh Debian or Ubuntu desktop lacks
``libxcb-cursor0`` and friends. The check asks the dynamic loader (``ldd``) about Qt's own plugin,
so it names exactly what this Qt build needs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

LDD_TIMEOUT_S = 10


def uses_xcb(environ: Mapping[str, str]) -> bool:
    """Whether Qt will open its window through X11 (xcb) in this environment."""
    if not sys.platform.startswith("linux"):
        return False
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(":")[0] == "xcb"
    return not environ.get("WAYLAND_DISPLAY")


def xcb_plugin() -> Path:
    """Qt's xcb platform plugin, from a source install or a PyInstaller bundle."""
    from PySide6.QtCore import QLibraryInfo  # this module runs before Qt is known to load

    return Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms" / "libqxcb.so"


def missing_libraries(binary: Path) -> list[str]:
    """The shared libraries ``binary`` needs that the loader cannot find (sonames, in ldd's order).

    Empty when all are found, or when there is no ``ldd`` to ask (then Qt reports any problem itself).
    """
    ldd = shutil.which("ldd")
    if ldd is None or not binary.exists():
        return []
    try:
        out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return not_found(out)


def not_found(ldd_output: str) -> list[str]:
    """The system libraries ``ldd`` could not find, each once; Qt's own (shipped with the app) are left out."""
    missing = re.findall(r"^\s*(\S+) => not found", ldd_output, flags=re.MULTILINE)
    return [name for name in dict.fromkeys(missing) if not name.startswith("libQt6")]


def debian_package(soname: str) -> str:
    """Debian's package name for a library soname: ``libxcb-icccm.so.4`` -> ``libxcb-icccm4``."""
    match = re.fullmatch(r"lib(.+)\.so\.(\d+)", soname)
    if match is None:
        return soname
    name, version = match.group(1).lower(), match.group(2)
    return f"lib{name}{'-' if name[-1].isdigit() else ''}{version}"


def missing_xcb_message(environ: Mapping[str, str] = os.environ) -> str | None:
    """One line naming the missing libraries and the apt command that installs them; None if Qt can start."""
    if not uses_xcb(environ):
        return None
    missing = missing_libraries(xcb_plugin())
    if not missing:
        return None
    packages = " ".join(debian_package(name) for name in missing)
    return (
        f"error: Qt cannot open a window: the system libraries {', '.join(missing)} are missing. "
        f"Install them (Debian/Ubuntu: sudo apt install {packages}) and start again."
    )
