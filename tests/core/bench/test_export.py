"""Exporting the default model small: safetensors + tokenizer, split into parts, joined elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.cli import main
from core.bench.export import export_model
from core.bench.join_parts import MANIFEST, join_folder

REPO = Path(__file__).resolve().parents[3]
PROMPT = "def fibonacci(n):\n    "


def _join_with_stdlib_only(folder: Path) -> subprocess.CompletedProcess:
    """``python -S -m core.bench.join_parts`` with nothing but the checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-S", "-m", "core.bench.join_parts", str(folder)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _greedy(model, tokenizer, tokens: int = 24) -> list[int]:
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False)
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.default_model
def test_fp32_export_split_and_joined_gives_the_same_greedy_output(default_loaded, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "export"
    result = export_model(default_loaded, folder, torch.float32, split_bytes=40_000_000)
    assert result.split and (folder / MANIFEST).is_file()
    assert all(size <= 40_000_000 for _, size in result.files)
    assert not (folder / "model.safetensors").exists()
    assert default_loaded.model.dtype == torch.float32  # the loaded model is left as it was

    proc = _join_with_stdlib_only(folder)
    assert proc.returncode == 0, proc.stderr
    assert "Joined 1 file(s)" in proc.stdout
    assert sorted(p.name for p in folder.iterdir() if ".part" in p.name) == []

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer(PROMPT)["input_ids"] == default_loaded.tokenizer(PROMPT)["input_ids"]
    assert _greedy(model, tokenizer) == _greedy(default_loaded.model, default_loaded.tokenizer)


@pytest.mark.default_model
def test_cli_exports_fp16_in_parts_of_at_most_60_mb(
    default_loaded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    folder = tmp_path / "fp16"
    assert main(["export-model", "--out", str(folder), "--split-mb", "60"]) == 0
    assert "core.bench.join_parts" in capsys.readouterr().out
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert max(sizes.values()) <= 60_000_000
    assert sum(sizes.values()) < 280_000_000  # half the fp32 checkpoint
    assert {"tokenizer.json", "config.json", "model.safetensors.part000", MANIFEST} <= set(sizes)

    join_folder(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.float16
    exported = model.state_dict()
    for name, weight in default_loaded.model.state_dict().items():
        assert torch.equal(exported[name], weight.half()), name


@pytest.mark.default_model
def test_export_refuses_a_folder_that_is_not_empty(default_loaded, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        export_model(default_loaded, tmp_path, torch.float16)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
