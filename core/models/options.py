"""What to load (a model source) and how (device, dtype, quantization), validated."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.models.catalog import CatalogEntry, fetched_path, find_entry
from core.paths import AppPaths

SourceKind = Literal["default", "folder", "gguf", "hub"]
SOURCE_KINDS: tuple[str, ...] = ("default", "folder", "gguf", "hub")
DEVICES: tuple[str, ...] = ("auto", "cuda", "cpu")
DTYPES: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
QUANTIZATIONS: tuple[str, ...] = ("auto", "none", "8bit", "4bit")
ATTENTIONS: tuple[str, ...] = ("sdpa", "eager")


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from.

    Attributes:
        kind: ``default`` (the embedded SmolLM2-135M-Instruct), ``folder`` (a local Hugging Face
            model folder), ``gguf`` (a local llama-family ``.gguf`` file) or ``hub`` (a repo id).
        location: the folder, file or repo id; empty for ``default``.
    """

    kind: SourceKind = "default"
    location: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"Unknown model source {self.kind!r}; use one of {', '.join(SOURCE_KINDS)}.")
        if not isinstance(self.location, str):
            raise ValueError(f"A model location must be text (got {self.location!r}).")
        if self.kind != "default" and not self.location.strip():
            raise ValueError(f"A {self.kind} model source needs a location.")

    @property
    def display_name(self) -> str:
        if self.kind == "default":
            return "SmolLM2-135M-Instruct"
        if self.kind == "hub":
            return self.location.rstrip("/").split("/")[-1]
        path = Path(self.location)
        return path.stem if self.kind == "gguf" else path.name


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model; ``auto`` values are resolved per device by the loader."""

    device: str = "auto"
    dtype: str = "auto"
    quantization: str = "auto"
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("device", self.device, DEVICES),
            ("dtype", self.dtype, DTYPES),
            ("quantization", self.quantization, QUANTIZATIONS),
            ("attention", self.attn_implementation, ATTENTIONS),
        ):
            if value not in allowed:
                raise ValueError(f"Invalid {name} {value!r}; use one of {', '.join(allowed)}.")


def source_from_spec(spec: str, paths: AppPaths | None = None) -> ModelSource:
    """Read a command-line model spec: 'default', a catalog id, a folder, a .gguf file, or an owner/name repo id.

    A catalog id (``lookahead-chat fetch --list``) names the model fetched into ``paths`` (by default the
    user's folders); a local folder of the same name is reached as ``./NAME``.

    Raises:
        ModelNotFoundError: ``spec`` is a catalog id whose model is not fetched yet.
    """
    if spec == "default":
        return ModelSource()
    entry = find_entry(spec)
    if entry is not None:
        return catalog_source(entry, paths or AppPaths.default())
    path = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        return ModelSource("gguf", str(path))
    if path.exists() or spec.startswith((".", "/", "~")) or "\\" in spec:
        return ModelSource("folder", str(path))
    if spec.count("/") == 1:
        return ModelSource("hub", spec)
    return ModelSource("folder", str(path))


def catalog_source(entry: CatalogEntry, paths: AppPaths) -> ModelSource:
    """The source that loads catalog ``entry``: the default model, or its fetched GGUF file.

    Raises:
        ModelNotFoundError: the entry is not fetched yet (the default model is fetched by its first load).
    """
    if entry.is_default:
        return ModelSource()
    return ModelSource("gguf", str(fetched_path(entry, paths)))
