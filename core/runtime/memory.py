"""The computer's memory: what weight copies and layouts may take without swapping."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SystemMemory:
    """The computer's memory, in bytes: all of it, and what can be taken now without swapping."""

    total: int
    available: int


def system_memory() -> SystemMemory | None:
    """The computer's memory now; ``None`` where it cannot be read (neither Linux nor Windows)."""
    if sys.platform == "win32":
        return _windows_memory()
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return SystemMemory(total, int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _windows_memory() -> SystemMemory | None:
    import ctypes  # Windows only

    class MemoryStatus(ctypes.Structure):
        _fields_ = [
            ("length", ctypes.c_ulong),
            ("load", ctypes.c_ulong),
            ("total", ctypes.c_ulonglong),
            ("available", ctypes.c_ulonglong),
            ("total_page", ctypes.c_ulonglong),
            ("available_page", ctypes.c_ulonglong),
            ("total_virtual", ctypes.c_ulonglong),
            ("available_virtual", ctypes.c_ulonglong),
            ("available_extended", ctypes.c_ulonglong),
        ]

    status = MemoryStatus(length=ctypes.sizeof(MemoryStatus))
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return None
    return SystemMemory(status.total, status.available)
