"""Our CPU kernels, as torch operators built where the app runs.

``lookahead::int8_decoder`` (``resources/kernels/int8_decoder.cpp``): a whole decoding step of an int8
LLaMA-family model (every layer, then the head on the rows kept) in one call and one parallel region.
Its products (``int8_products.h``) round each input row to integers at its own scale and stream each
int8 weight once for all the step's rows, summing in int32: with AVX-512 VNNI the weights are packed
for it and each row goes in as two bytes (15 bits; vpdpbusd, AMX tiles for 2+ rows where present),
elsewhere as int16 (11-15 bits, as many as exact int32 sums allow).
Its attention (``row_attention.h``) computes each new token on its own, its sums in cache order. Integer
sums are exact in any order and every other part runs each row alike, so every token of a lookahead step
gets exactly the logits a 1-token step would give it.

They are C++ compiled with the compiler the compiled steps already need (inductor's builder), once, into
the package cache next to the steps, keyed by their sources, torch and the vector instructions. The step's
arithmetic (``decoder_step.cpp``) and the operators (``int8_decoder.cpp``, the only one to parse the torch
headers) compile side by side, then link. Only x86-64 processors with AVX2 (or more) run them; elsewhere int8 products stay
weight-only, through torch's kernel.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import platform
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from core.runtime.compiled.toolchain import cache_dir, vector_instructions, vector_isa_from_flags

if TYPE_CHECKING:
    from torch._inductor.cpp_builder import CppTorchOptions
    from torch._inductor.cpu_vec_isa import VecISA

SOURCES = (
    "int8_decoder.cpp",
    "decoder_step.cpp",
    "decoder_step.h",
    "int8_products.h",
    "block_products.h",
    "amx_tiles.h",
    "row_attention.h",
)
"""The C++ sources: the operators, the step's arithmetic and the headers they include (all of them key the built
library)."""

OPERATORS = "int8_decoder.cpp"
"""The operators' source: tensor checks and allocation, no hot loop, so optimized as little as inductor's wrapper
code (its torch headers take most of the compiler's time)."""


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
    """Build the kernels where they are not built yet and load them into this process. Raises where they cannot
    be built (no compiler, say): the caller then keeps the eager step."""
    library = library_path()
    build(library)
    torch.ops.load_library(str(library))


def activation_bits() -> int:
    """The bits (sign included) ``int8_decoder`` rounds each input row to here: 15 where it multiplies two bytes
    (AVX-512 VNNI), 16 with int16. The kernels must be loaded (:func:`load`, with the vector instructions from
    the processor's flags: a load of its own here would take inductor's slower probe)."""
    return int(torch.ops.lookahead.int8_levels(1)).bit_length() + 1


def packs_weights() -> bool:
    """Whether ``int8_decoder`` reads the weights as ``int8_pack`` packs them (AVX-512 VNNI). The kernels must be
    loaded."""
    return bool(torch.ops.lookahead.int8_packs())


@functools.cache
def build_key() -> str:
    """What the built kernels are: their sources, torch and this processor's vector instructions (a new
    key is a new library, and a step cost to measure again)."""
    code = b"".join(path.read_bytes() for path in sources())
    return hashlib.sha256(f"{code!r} {torch.__version__} {vector_instructions()}".encode()).hexdigest()[:24]


def library_path() -> Path:
    """Where the kernels built for this processor, torch and sources lie (in the package cache)."""
    suffix = ".pyd" if os.name == "nt" else ".so"
    return cache_dir() / "lookahead-kernels" / f"kernels-{build_key()}{suffix}"


def build(library: Path, stale_s: float = 180.0) -> None:
    """Build ``library`` where it is not built yet, unless another process is building it (a child in the
    background, say): then wait for it. A lock older than ``stale_s`` was left by a build that was killed
    (one stopped by :func:`remove_leftovers` leaves none)."""
    lock = _lock(library)
    library.parent.mkdir(parents=True, exist_ok=True)
    while not library.exists():
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(handle, str(os.getpid()).encode())
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


def remove_leftovers(library: Path, pid: int) -> None:
    """What a build by process ``pid``, killed, left: its partial library and objects, the builder's working
    folders, and its lock."""
    for leftover in library.parent.glob(f"{glob.escape(_partial(library, pid).name)}*"):
        if leftover.is_dir():  # the builder's working folder
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    lock = _lock(library)
    try:
        if lock.read_text() == str(pid):
            lock.unlink(missing_ok=True)
    except (FileNotFoundError, UnicodeDecodeError):
        pass


def _lock(library: Path) -> Path:
    return library.with_name(f"{library.name}.lock")


def _partial(library: Path, pid: int) -> Path:
    """The builder's name for the library a build by ``pid`` compiles (it adds the suffix)."""
    return library.with_name(f"{library.stem}.{pid}.partial")


def _build(library: Path) -> None:
    """Compile the sources into ``library``, whole or not at all: each source to an object in a thread of its own
    (the compiler is a child process), then the objects linked."""
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions  # inductor: only when building
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    name = _partial(library, os.getpid()).name
    folder = str(library.parent)
    with vector_isa_from_flags():
        isa = pick_vec_isa()
        objects = [
            CppBuilder(f"{name}.{path.stem}", [str(path)], _object_options(isa, path.name == OPERATORS), folder)
            for path in sources()
            if path.suffix == ".cpp"  # the headers come in through them
        ]
        linked = [builder.get_target_file_path() for builder in objects]
        linker = CppBuilder(name, linked, CppTorchOptions(vec_isa=isa, include_pytorch=True, shared=True), folder)
        built = Path(linker.get_target_file_path())
        try:
            with ThreadPoolExecutor(len(objects)) as pool:
                list(pool.map(CppBuilder.build, objects))
            linker.build()
            built.replace(library)
        finally:
            for output in (built, *map(Path, linked)):
                output.unlink(missing_ok=True)


def _object_options(isa: VecISA, operators: bool) -> CppTorchOptions:
    """How inductor's builder compiles one source to an object: as its own steps, the operators at its wrapper
    code's optimization level."""
    from torch._inductor.cpp_builder import CppTorchOptions  # inductor: only when building

    return CppTorchOptions(vec_isa=isa, include_pytorch=True, compile_only=True, min_optimize=operators)
