"""A local package index of a model's parts, as the catalog's PyPI wheels are: a folder of wheels pip finds
(``PIP_NO_INDEX`` with ``PIP_FIND_LINKS``), each holding one slice of the model file."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from core.models.catalog import CatalogEntry, Part, PypiParts

VERSION = "1.0.0"
PARTS = 3


class Index:
    """A folder of wheels pip finds (``PIP_FIND_LINKS``), one part of the model file in each."""

    def __init__(self, folder: Path, model: bytes, stem: str = "tiny-model") -> None:
        self.folder = folder
        folder.mkdir()
        step = -(-len(model) // PARTS)
        self.slices = [model[i : i + step] for i in range(0, len(model), step)]
        parts = []
        for number, data in enumerate(self.slices, start=1):
            package = f"{stem}-part{number}"
            member = f"{package.replace('-', '_')}/data/part{number:02d}.bin"
            parts.append(Part(package, member, len(data), hashlib.sha256(data).hexdigest()))
        self.entry = CatalogEntry(
            id="tiny-model",
            name="Tiny-Model-Instruct",
            label="Tiny-Model",
            file_name="tiny-model.gguf",
            size=len(model),
            sha256=hashlib.sha256(model).hexdigest(),
            ram=10**8,
            licence="Apache-2.0",
            parts=PypiParts(VERSION, tuple(parts)),
            hub=None,
        )
        for number in range(1, len(parts) + 1):
            self.publish(number)

    def wheel(self, number: int) -> Path:
        return (
            self.folder / f"{self.entry.parts.parts[number - 1].package.replace('-', '_')}-{VERSION}-py3-none-any.whl"
        )

    def publish(self, number: int, data: bytes | None = None) -> None:
        """Write the wheel of part ``number`` (with ``data`` instead of the right slice: a corrupted one)."""
        part = self.entry.parts.parts[number - 1]
        name = part.package.replace("-", "_")
        info = f"{name}-{VERSION}.dist-info"
        with zipfile.ZipFile(self.wheel(number), "w") as wheel:
            wheel.writestr(part.member, self.slices[number - 1] if data is None else data)
            wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {part.package}\nVersion: {VERSION}\n")
            wheel.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            wheel.writestr(f"{info}/RECORD", "")

    def withdraw(self, number: int) -> None:
        self.wheel(number).unlink()
