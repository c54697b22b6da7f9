"""How our code drives inductor's C++ toolchain (compiling steps, building our kernels).

Inductor takes about a second to import: only what compiles or builds imports this module's context.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


@contextmanager
def vector_isa_from_flags() -> Iterator[None]:
    """The vector instructions from the processor's flags: inductor's own probe compiles and loads a test
    program per instruction set (7.6 s at a first start here, 1.1 s later). A compiler that cannot
    build them fails the compile, and the step stays eager."""
    import torch._inductor.config as inductor_config  # inductor: only where something compiles or builds

    with quiet_torch(), inductor_config.patch({"cpp.vec_isa_ok": True}):
        yield


def vector_instructions() -> str:
    """The processor's vector instructions that decide what inductor's builder compiles for, read from its
    flags as inductor reads them (``cpu_vec_isa.pick_vec_isa``), without inductor: its pick also compiles a
    probe program (0.4 s at every start on a processor with AMX)."""
    features = {
        "vnni": torch.cpu._is_vnni_supported(),
        "amx": torch.cpu._is_amx_tile_supported(),
        "amx_fp16": torch.cpu._is_amx_fp16_supported(),
        "avx512_bf16": torch.cpu._is_avx512_bf16_supported(),
    }
    capability = torch.backends.cpu.get_cpu_capability()
    return " ".join([capability, *(name for name, present in features.items() if present)])


def cache_dir() -> Path:
    """Inductor's cache folder (``TORCHINDUCTOR_CACHE_DIR``, which the app sets as it starts:
    ``core.paths.AppPaths.use_compile_dir``), importing inductor only to find its default."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen:
        return Path(chosen)
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir  # inductor: only here

    return Path(inductor_cache_dir())


@contextmanager
def quiet_torch() -> Iterator[None]:
    """Warnings from torch's own compiling code with nothing for the user: a deprecated pytree class in
    export and the package loader, and the missing Python headers (the compiled code does not use them;
    an installed app has none)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
        warnings.filterwarnings("ignore", message="Can't find Python.h", category=UserWarning)
        yield
