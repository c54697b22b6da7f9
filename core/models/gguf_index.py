"""A GGUF file's tensor index: each tensor's name, shape, type and bytes, over one memory map of the file.

``gguf``'s reader builds an object for every item of every metadata array, and a 150,000-token vocabulary
took it 8.7 s here; loading a model needs only the architecture and the tensors. This reads the header,
steps over the metadata (the strings' lengths only), and reads the tensor infos: a fraction of a second.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types: fixed sizes by type id (8 = string, 9 = array)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: its GGML shape (innermost first), GGUF type and where its bytes lie in the file."""

    name: str
    shape: tuple[int, ...]
    tensor_type: int
    offset: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class GGUFIndex:
    """A GGUF file's architecture, scalar metadata and tensors, and the file's bytes (a copy-on-write map:
    numpy views of it are writable for torch and never written)."""

    architecture: str
    metadata: dict[str, object]  # the scalar and string values (arrays left out)
    tensors: dict[str, TensorInfo]
    data: np.ndarray  # the whole file, uint8
    buffer: mmap.mmap  # the map under data

    def bytes_of(self, tensor: TensorInfo) -> np.ndarray:
        """The tensor's bytes: a view of the file."""
        return self.data[tensor.offset : tensor.offset + tensor.n_bytes]

    def release(self, tensor: TensorInfo) -> None:
        """Give back the memory of the tensor's pages read so far (the whole pages within it): for a tensor
        copied into another layout, so that the process holds the copy, not the copy and the file's pages too.
        A later read of its bytes reads the file again. Nothing where the system cannot (Windows)."""
        if not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = -(-tensor.offset // mmap.PAGESIZE) * mmap.PAGESIZE
        stop = (tensor.offset + tensor.n_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if stop > start:
            self.buffer.madvise(mmap.MADV_DONTNEED, start, stop - start)


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.at = buffer, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.buffer, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.take("<Q")
        text = self.buffer[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def value(self, kind: int) -> object:
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.take("<I"), self.take("<Q")
            if item == _STRING:
                for _ in range(count):
                    length = self.take("<Q")  # read before the sum: take() moves the cursor
                    self.at += length
            elif item in _SIZES:
                self.at += _SIZES[item] * count
            else:
                for _ in range(count):
                    self.value(item)
            return None
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
        if kind not in fmt:
            raise ValueError(f"unknown metadata value type {kind}")
        return self.take(fmt[kind])


def read_index(path: Path) -> GGUFIndex:
    """The index of the GGUF file at ``path``. Raises ``ValueError`` where the file is not a whole GGUF file."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # gguf's type table only

    with path.open("rb") as handle:
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    cursor = _Cursor(buffer)
    if buffer[:4] != MAGIC:
        raise ValueError("not a GGUF file (no GGUF magic)")
    version = struct.unpack_from("<I", buffer, 4)[0]
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    cursor.at = 8
    n_tensors, n_fields = cursor.take("<Q"), cursor.take("<Q")
    metadata: dict[str, object] = {}
    for _ in range(n_fields):
        key = cursor.string()
        value = cursor.value(cursor.take("<I"))
        if value is not None:
            metadata[key] = value
    infos = []
    for _ in range(n_tensors):
        name = cursor.string()
        dims = cursor.take("<I")
        shape = tuple(cursor.take("<Q") for _ in range(dims))
        infos.append((name, shape, cursor.take("<I"), cursor.take("<Q")))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))  # type: ignore[call-overload]
    start = (cursor.at + alignment - 1) // alignment * alignment
    tensors = {}
    for name, shape, kind, offset in infos:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        elements = 1
        for dim in shape:
            elements *= dim
        tensor = TensorInfo(name, shape, kind, start + offset, elements // block * size)
        if tensor.offset + tensor.n_bytes > len(buffer):
            raise ValueError(f"the file ends inside tensor {name} (truncated)")
        tensors[name] = tensor
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str):
        raise ValueError("no general.architecture in the metadata")
    return GGUFIndex(architecture, metadata, tensors, np.frombuffer(buffer, dtype=np.uint8), buffer)
