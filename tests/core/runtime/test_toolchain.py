"""Driving inductor's C++ toolchain: the cache folder the app keeps it in, and what keys our kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.runtime.compiled import kernels
from core.runtime.compiled.toolchain import CACHE_VARIABLE, vector_instructions, vector_isa_from_flags

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not kernels.supported(), reason="the kernels need an x86-64 processor with AVX2")
def test_the_kernels_are_found_without_loading_inductor(tmp_path) -> None:
    """Inductor takes about a second to import, and its pick of the vector instructions compiles a probe:
    a warm start finds the built kernels without either."""
    code = (
        "import sys\n"
        "from core.runtime.compiled import kernels\n"
        "path = kernels.library_path()\n"
        "assert path.parent.parent == __import__('pathlib').Path(sys.argv[1]), path\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch._inductor')))\n"
    )
    env = {**os.environ, CACHE_VARIABLE: str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not kernels.supported(), reason="the kernels need an x86-64 processor with AVX2")
def test_the_kernels_key_names_the_instructions_inductor_builds_them_for() -> None:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    with vector_isa_from_flags():
        picked = str(pick_vec_isa()).split()
    capability, *features = vector_instructions().split()
    assert picked[0] == capability.lower()
    if capability == "AVX512":
        assert ("avx512_vnni" in picked) == ("vnni" in features)
        assert "amx_tile" not in picked or "amx" in features
