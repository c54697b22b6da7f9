"""GGUF files: a real tiny llama GGUF loads; truncated, damaged and unsupported ones raise typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_gguf import write_metadata_gguf, write_tiny_llama_gguf

from core.models import (
    CorruptModelError,
    LoadOptions,
    ModelNotFoundError,
    ModelSource,
    UnsupportedArchitectureError,
    load_model,
)
from core.models.gguf_file import (
    CONVERTED_MARKER,
    cached_gguf_checkpoint,
    converted_gguf_dir,
    supported_gguf_architectures,
    validate_gguf,
)
from core.paths import AppPaths


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    model = write_tiny_llama_gguf(path)
    return path, model


@pytest.fixture
def isolated_paths(tmp_path: Path) -> AppPaths:
    """Own model cache too: GGUF conversions must not land in the user's real cache."""
    return AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache").ensure()


def test_valid_gguf_is_llama(tiny_gguf) -> None:
    assert validate_gguf(tiny_gguf[0]) == "llama"


def test_load_gguf_file_gives_the_same_model(tiny_gguf, isolated_paths: AppPaths) -> None:
    path, original = tiny_gguf
    fractions: list[float] = []
    loaded = load_model(
        ModelSource("gguf", str(path)),
        LoadOptions(device="cpu", dtype="fp32"),
        isolated_paths,
        progress=lambda stage, frac: fractions.append(frac),
    )
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert loaded.name == "tiny-llama"
    assert loaded.has_chat_template
    assert loaded.tokenizer.eos_token == "<|im_end|>"
    ids = loaded.tokenizer("hello world")["input_ids"]
    assert loaded.tokenizer.decode(ids) == "hello world"
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(loaded.model(x).logits, original(x).logits)
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    # converted once into the cache, then reused
    target = converted_gguf_dir(path, isolated_paths.models_dir)
    assert (target / CONVERTED_MARKER).is_file() and (target / "model.safetensors").is_file()
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert cached_gguf_checkpoint(path, isolated_paths.models_dir) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime


def test_missing_gguf(tmp_path: Path, isolated_paths: AppPaths) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(ModelSource("gguf", str(tmp_path / "nope.gguf")), LoadOptions(device="cpu"), isolated_paths)


@pytest.mark.parametrize("keep", [0.5, 0.99, 2000, 10, 0], ids=["half", "last-1%", "2000-bytes", "10-bytes", "empty"])
def test_truncated_gguf(tiny_gguf, tmp_path: Path, isolated_paths: AppPaths, keep: float) -> None:
    data = tiny_gguf[0].read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data[:n])
    with pytest.raises(CorruptModelError, match="damaged or truncated") as err:
        load_model(ModelSource("gguf", str(bad)), LoadOptions(device="cpu"), isolated_paths)
    assert "Download the file again" in str(err.value)
    assert not (isolated_paths.models_dir / "gguf").exists() or not any((isolated_paths.models_dir / "gguf").iterdir())


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_bytes(b"this is a text file, not a model\n" * 64)
    with pytest.raises(CorruptModelError, match="notes.gguf"):
        validate_gguf(bad)


@pytest.mark.parametrize("architecture", ["bert", "t5", "general", "tokenizer"])
def test_unsupported_gguf_architecture(tmp_path: Path, isolated_paths: AppPaths, architecture: str) -> None:
    path = tmp_path / f"{architecture}.gguf"
    write_metadata_gguf(path, architecture)
    with pytest.raises(UnsupportedArchitectureError, match=f"'{architecture}' model") as err:
        load_model(ModelSource("gguf", str(path)), LoadOptions(device="cpu"), isolated_paths)
    assert "llama" in err.value.todo


def test_supported_architectures_are_causal_lms() -> None:
    supported = supported_gguf_architectures()
    assert {"llama", "mistral", "qwen2"} <= supported
    assert not {"general", "tokenizer", "t5", "umt5"} & supported


def test_gguf_missing_tensors_is_corrupt(
    tmp_path: Path, isolated_paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A well-formed GGUF that lacks a layer's tensors must not become a partly random model."""
    import gguf

    add_tensor = gguf.GGUFWriter.add_tensor

    def without_layer_1(self, name, *args, **kwargs):
        if not name.startswith("blk.1."):
            add_tensor(self, name, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", without_layer_1)
    path = tmp_path / "holes.gguf"
    write_tiny_llama_gguf(path)
    monkeypatch.undo()
    assert validate_gguf(path) == "llama"  # the file itself reads fine
    with pytest.raises(CorruptModelError, match="has no tensor blk.1.attn_q.weight"):  # read as stored
        load_model(ModelSource("gguf", str(path)), LoadOptions(device="cpu"), isolated_paths)
    with pytest.raises(CorruptModelError, match="lacks 9 weight tensors") as err:  # through transformers
        load_model(ModelSource("gguf", str(path)), LoadOptions(device="cpu", quantization="none"), isolated_paths)
    assert "model.layers.1." in err.value.what
    assert not any((isolated_paths.models_dir / "gguf").glob("holes-*"))  # nothing half-converted is cached
