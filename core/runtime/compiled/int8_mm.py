"""The int8 kernel of the compiled layers: int8 weights times integer activations (each input row
rounded at its own scale to as many levels as exact int32 sums allow, 11-15 bits), summed in int32,
as the torch operator ``lookahead::int8_mm``.

Torch's int8 kernel widens every weight to the input's dtype and multiplies in floating point, and
does no blocking across rows, so a step of k tokens costs about k one-token products. This one
(``resources/kernels/int8_mm.cpp``) widens each weight once to int16 for a tile of input rows and
multiplies with AVX2's integer multiply-add: less arithmetic per weight byte, and wider steps reuse
each weight they load. Integer sums are exact in any order, so a row's result is the same whichever
rows share the call: a lookahead step computes each token's products exactly as a 1-token step does.
The activations keep more bits than bf16's 8 (the app's int8 activations otherwise), so answers
lose nothing to them (docs/performance.md).

It is C++ built where the app runs, with the compiler the compiled steps already need (inductor's
builder, about 16 s once), into the package cache next to the steps, keyed by its source, torch and
the vector instructions. Only x86-64 processors with AVX2 (or more) run it; elsewhere int8 products
stay weight-only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import time
from pathlib import Path

import torch

OPERATOR = "lookahead::int8_mm"


def source() -> Path:
    """The kernel's C++ source, among the app's resources."""
    from core.paths import resource_path  # platformdirs: core.runtime imports only torch and transformers up front

    return resource_path("kernels", "int8_mm.cpp")


def supported() -> bool:
    """Whether this processor runs the kernel (x86-64 with AVX2), as torch's own kernels see it (so
    ``ATEN_CPU_CAPABILITY=default`` turns it off too)."""
    machine = platform.machine().lower()
    capability = torch.backends.cpu.get_cpu_capability()
    return machine in ("x86_64", "amd64") and capability in ("AVX2", "AVX512") and source().is_file()


@functools.cache
def load() -> None:
    """Build the kernel where it is not built yet, load it into this process and tell export its output's
    shape. Raises where it cannot be built (no compiler, say): the caller's compile then fails and the
    step stays eager, as a failing step compile does."""
    library = _library_path()
    if not library.exists():
        _build_once(library)
    torch.ops.load_library(str(library))
    torch.library.register_fake(OPERATOR)(_output_like)


def _output_like(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


def _library_path() -> Path:
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # inductor takes about a second to import: only when compiling
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    key = hashlib.sha256(f"{source().read_bytes()!r} {torch.__version__} {pick_vec_isa()}".encode()).hexdigest()[:24]
    suffix = ".pyd" if os.name == "nt" else ".so"
    return Path(cache_dir()) / "lookahead-kernels" / f"int8_mm-{key}{suffix}"


def _build_once(library: Path, stale_s: float = 180.0) -> None:
    """Build ``library`` unless another process is building it (children compiling steps side by side
    all need it): then wait for it. A lock older than ``stale_s`` was left by a build that was killed."""
    lock = library.with_name(f"{library.name}.lock")
    library.parent.mkdir(parents=True, exist_ok=True)
    while not library.exists():
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime > stale_s:
                    lock.unlink(missing_ok=True)
            except FileNotFoundError:  # the build just ended
                pass
            time.sleep(0.1)
            continue
        try:
            if not library.exists():
                _build(library)
        finally:
            os.close(handle)
            lock.unlink(missing_ok=True)


def _build(library: Path) -> None:
    """Compile the source into ``library``, whole or not at all."""
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions  # inductor: only when building
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    name = f"{library.stem}.{os.getpid()}.partial"
    options = CppTorchOptions(vec_isa=pick_vec_isa(), include_pytorch=True, shared=True)
    builder = CppBuilder(name, [str(source())], options, output_dir=str(library.parent))
    built = Path(builder.get_target_file_path())
    try:
        builder.build()
        built.replace(library)
    finally:
        built.unlink(missing_ok=True)
