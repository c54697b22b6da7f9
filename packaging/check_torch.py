"""Check that the packaging environment's torch is the build the installer variant promises.

    python packaging/check_torch.py cpu|cuda

Exits non-zero with what to do when, e.g., a plain `pip install torch` on Linux brought the
multi-gigabyte CUDA build into a CPU installer.
"""

from __future__ import annotations

import sys


def main(variant: str) -> int:
    import torch

    cuda = torch.version.cuda
    print(f"packaging with torch {torch.__version__} (CUDA {cuda or 'none'}) for the {variant} variant")
    if variant == "cpu" and cuda:
        print(
            "error: this torch is a CUDA build, the cpu variant needs the CPU build: "
            "set PKG_TORCH_INDEX to PyTorch's CPU wheel index (see packaging/INSTALL.md) and run "
            "`rm -rf build/pkg-venv-cpu` first",
            file=sys.stderr,
        )
        return 1
    if variant == "cuda" and not cuda:
        print(
            "error: this torch is a CPU build, the cuda variant needs a CUDA build: set PKG_TORCH_INDEX "
            "to a PyTorch CUDA wheel index (Windows) or leave it empty (Linux, PyPI's torch is CUDA) "
            "and run `rm -rf build/pkg-venv-cuda` first",
            file=sys.stderr,
        )
        return 1
    if variant not in ("cpu", "cuda"):
        print(f"error: VARIANT must be cpu or cuda, not {variant!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
