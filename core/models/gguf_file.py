"""Local llama-family GGUF files: validate them and convert them once into a cached checkpoint."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from core.models.errors import CorruptModelError, ModelNotFoundError, UnsupportedArchitectureError
from core.progress import ProgressCallback, no_progress

CONVERTED_MARKER = ".converted"


def validate_gguf_path(path: Path) -> None:
    """A GGUF source's file must exist."""
    if not path.is_file():
        raise ModelNotFoundError(f"The GGUF file {path} does not exist.", "Check the path, or choose another model.")


def validate_gguf(path: Path) -> str:
    """Check that ``path`` is a readable GGUF of an architecture transformers can load; return it."""
    validate_gguf_path(path)
    from gguf import GGUFReader  # gguf (and numpy) load only when a GGUF file is chosen

    try:
        reader = GGUFReader(str(path))
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode()
    except Exception as err:  # the gguf reader raises many kinds on damaged files
        raise CorruptModelError(
            f"The GGUF file {path.name} is damaged or truncated ({type(err).__name__}: {err}).",
            "Download the file again.",
        ) from err
    supported = supported_gguf_architectures()
    if architecture not in supported:
        raise UnsupportedArchitectureError(
            f"The GGUF file {path.name} holds a '{architecture}' model, which this app cannot load from GGUF.",
            f"Use a GGUF of one of: {', '.join(sorted(supported))}; or a Hugging Face model folder.",
        )
    return architecture


def supported_gguf_architectures() -> set[str]:
    """GGUF architectures transformers reads AND that are decoder-only causal LMs.

    transformers' GGUF_CONFIG_MAPPING also holds the non-architecture sections 'general' and
    'tokenizer' and the encoder-decoder 't5'/'umt5', which cannot chat.
    """
    from transformers.integrations.ggml import (
        GGUF_CONFIG_MAPPING,  # transformers takes seconds to import: only when a GGUF file is chosen
    )
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return {a for a in GGUF_CONFIG_MAPPING if a in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES}


def converted_gguf_dir(path: Path, models_dir: Path) -> Path:
    """Cache folder of a GGUF's conversion, keyed by its name, size and modification time."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return models_dir / "gguf" / f"{path.stem}-{key}"


def cached_gguf_checkpoint(path: Path, models_dir: Path, progress: ProgressCallback = no_progress) -> Path:
    """Validate ``path`` and return its converted checkpoint, converting it on first use."""
    validate_gguf(path)
    target = converted_gguf_dir(path, models_dir)
    if (target / CONVERTED_MARKER).is_file():
        return target
    progress(f"Converting {path.name} (once)", 0.1)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".convert-") as tmp:
        out = Path(tmp) / "model"
        convert_gguf_to_safetensors(path, out)
        (out / CONVERTED_MARKER).write_text(str(path) + "\n")
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target


def convert_gguf_to_safetensors(gguf_file: Path, out_dir: Path) -> None:
    """Dequantise a GGUF into a plain transformers checkpoint in ``out_dir``.

    Models under 1B parameters keep fp32 (so greedy output is exactly reproducible); larger ones
    are stored in bf16 to halve memory and disk.
    """
    import torch  # transformers takes seconds to import: only when a model is converted
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        gguf_model, info = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, output_loading_info=True
        )
    except (ValueError, KeyError, OSError) as err:
        raise CorruptModelError(
            f"transformers could not read {gguf_file.name}: {err}", "Download the file again."
        ) from err
    # transformers fills weights a file lacks with random values and only logs it: refuse that.
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise CorruptModelError(
            f"The GGUF file {gguf_file.name} lacks {len(missing)} weight tensors (such as {missing[0]}), "
            "so it is incomplete or damaged.",
            "Download the file again.",
        )
    params = sum(p.numel() for p in gguf_model.parameters())
    dtype = torch.float32 if params < 1e9 else torch.bfloat16
    # A GGUF-loaded model refuses save_pretrained: rebuild a plain one from its weights.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict(gguf_model.state_dict(), strict=True)
    plain.generation_config = gguf_model.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
