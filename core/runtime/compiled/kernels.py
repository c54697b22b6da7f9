"""Our CPU kernels for the compiled rows layer, as torch operators built where the app runs.

``lookahead::int8_mm`` (``resources/kernels/int8_mm.cpp``): int8 weights times integer activations
(each input row rounded at its own scale), summed in int32. Torch's int8 kernel widens every weight to
the input's dtype, multiplies in floating point and does no blocking across rows, so a step of k
tokens costs about k one-token products. This one streams each weight row once and multiplies it
into every input row with the integer multiply-add. With AVX-512 VNNI the rows are rounded to bytes
(W8A8: 64 weights an instruction, half the arithmetic of int16's, which wide steps are bound by);
elsewhere to int16 (11-15 bits, as many as exact int32 sums allow). Byte activations score the
quality text within 1% of int16's and better than the weight-only eager int8 step (docs/performance.md).
Integer sums are exact in any order, so a row's result is the same whichever rows share the call.

``lookahead::attention`` (``resources/kernels/attention.cpp``): each new token's attention over the
cache, summed in cache order so that masked entries and where the visible ones lie change no bit.

With both, every token of a lookahead step gets exactly the logits a 1-token step would give it. They
are C++ compiled with the compiler the compiled steps already need (inductor's builder, about 20 s
once), into the package cache next to the steps, keyed by their sources, torch and the vector
instructions. Only x86-64 processors with AVX2 (or more) run them; elsewhere int8 products stay
weight-only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import time
from pathlib import Path

import torch

SOURCES = ("int8_mm.cpp", "attention.cpp")


def sources() -> list[Path]:
    """The kernels' C++ sources, among the app's resources."""
    from core.paths import resource_path  # platformdirs: core.runtime imports only torch and transformers up front

    return [resource_path("kernels", name) for name in SOURCES]


def supported() -> bool:
    """Whether this processor runs the kernels (x86-64 with AVX2), as torch's own kernels see it (so
    ``ATEN_CPU_CAPABILITY=default`` turns them off too)."""
    machine = platform.machine().lower()
    capability = torch.backends.cpu.get_cpu_capability()
    return (
        machine in ("x86_64", "amd64")
        and capability in ("AVX2", "AVX512")
        and all(path.is_file() for path in sources())
    )


@functools.cache
def load() -> None:
    """Build the kernels where they are not built yet, load them into this process and tell export their
    outputs' shapes. Raises where it cannot be built (no compiler, say): the caller's compile then fails and the
    step stays eager, as a failing step compile does."""
    library = _library_path()
    if not library.exists():
        _build_once(library)
    torch.ops.load_library(str(library))
    torch.library.register_fake("lookahead::int8_mm")(_product_like)
    torch.library.register_fake("lookahead::attention")(_attention_like)


def activation_bits() -> int:
    """The bits ``int8_mm`` rounds each input row to here: 8 (AVX-512 VNNI) or 16. The kernels must be loaded
    (a compiled layer with integer activations loads them, through ``package.load_operators`` and its vector
    instructions from the processor's flags; a load of its own here would take inductor's slower probe)."""
    return 8 if torch.ops.lookahead.int8_mm_levels(1) == 127 else 16


def _product_like(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


def _attention_like(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    return query.new_empty(query.shape, dtype=torch.float32)


def _library_path() -> Path:
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # inductor takes about a second to import: only when compiling
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    code = b"".join(path.read_bytes() for path in sources())
    key = hashlib.sha256(f"{code!r} {torch.__version__} {pick_vec_isa()}".encode()).hexdigest()[:24]
    suffix = ".pyd" if os.name == "nt" else ".so"
    return Path(cache_dir()) / "lookahead-kernels" / f"kernels-{key}{suffix}"


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
    """Compile the sources into ``library``, whole or not at all."""
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions  # inductor: only when building
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    name = f"{library.stem}.{os.getpid()}.partial"
    options = CppTorchOptions(vec_isa=pick_vec_isa(), include_pytorch=True, shared=True)
    builder = CppBuilder(name, [str(path) for path in sources()], options, output_dir=str(library.parent))
    built = Path(builder.get_target_file_path())
    try:
        builder.build()
        built.replace(library)
    finally:
        built.unlink(missing_ok=True)
