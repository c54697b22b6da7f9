"""PyInstaller runtime hook: let the frozen Windows app find torch's CUDA DLLs.

Runs before the app's first import (so before torch is imported). Python 3.8+ on Windows no longer
searches PATH for the dependencies of extension modules, and a frozen app has no site-packages, so
the folders holding torch's, the NVIDIA wheels' and bitsandbytes' DLLs are registered here with
``os.add_dll_directory`` and put in front of PATH (for libraries loaded by name through ctypes).
Does nothing outside a frozen Windows app.
"""

import os
import sys


def _dll_dirs(root):
    """The folders of the bundle under ``root`` that may hold CUDA or torch DLLs, existing ones only."""
    candidates = [root, os.path.join(root, "torch", "lib"), os.path.join(root, "bitsandbytes")]
    nvidia = os.path.join(root, "nvidia")
    if os.path.isdir(nvidia):  # CUDA from the nvidia-* wheels: nvidia/<part>/bin
        for part in sorted(os.listdir(nvidia)):
            candidates.append(os.path.join(nvidia, part, "bin"))
    return [d for d in candidates if os.path.isdir(d)]


def _register(root):
    handles = []
    for folder in _dll_dirs(root):
        handles.append(os.add_dll_directory(folder))
    os.environ["PATH"] = os.pathsep.join([*_dll_dirs(root), os.environ.get("PATH", "")])
    return handles


if sys.platform == "win32" and getattr(sys, "frozen", False) and hasattr(os, "add_dll_directory"):
    # Keep the handles: closing one removes its folder from the search path again.
    sys._lookahead_chat_dll_dirs = _register(sys._MEIPASS)
