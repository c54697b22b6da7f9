"""Export a loaded model as a plain safetensors folder with its tokenizer, in a chosen dtype.

Made for carrying the default model to a machine where nothing of ours is installed (the GPU
check): fp16 halves the fp32 checkpoint the loader converts from the GGUF, and files larger than a
transfer allows can be split into parts that ``python -m core.bench.join_parts DIR`` joins again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from core.bench.join_parts import split_folder
from core.models.loader import LoadedModel


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    files: list[tuple[str, int]]  # name and size in bytes, sorted by name
    split: bool


def export_model(loaded: LoadedModel, out: Path, dtype: torch.dtype, split_bytes: int | None = None) -> ExportResult:
    """Write ``loaded`` to ``out`` in ``dtype`` (the loaded model itself is left untouched).

    Args:
        split_bytes: split files larger than this into parts (see core.bench.join_parts).

    Raises:
        ValueError: ``out`` exists and is not empty, or the model is quantized.
    """
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"The export folder {out} is not empty: choose a new folder, or empty this one first.")
    if loaded.quantization != "none":
        raise ValueError(
            f"The model is loaded in {loaded.quantization}; export needs it unquantized (quantization 'none')."
        )
    model = loaded.model
    config = copy.deepcopy(model.config)
    config.dtype = dtype
    with torch.device("meta"):  # no memory, no random initialisation: the weights come next
        clone = AutoModelForCausalLM.from_config(config, dtype=dtype)
    clone.load_state_dict(
        {k: v.detach().to("cpu", dtype) for k, v in model.state_dict().items()}, strict=True, assign=True
    )
    clone.tie_weights()
    clone.generation_config = copy.deepcopy(model.generation_config)
    out.mkdir(parents=True, exist_ok=True)
    clone.save_pretrained(out)
    loaded.tokenizer.save_pretrained(out)
    if split_bytes:
        split_folder(out, split_bytes)
    files = sorted((p.name, p.stat().st_size) for p in out.iterdir() if p.is_file())
    return ExportResult(out, files, bool(split_bytes) and any(name.endswith(".part000") for name, _ in files))
