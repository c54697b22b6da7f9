"""The GPU check runs in a bare interpreter (torch + transformers only) on the CPU with the tiny shape."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import bare_interpreter
import pytest
import torch

from core.bench.gpu.quantize import quantize_linears
from core.bench.gpu.shapes import SHAPES, random_model, weight_bytes
from core.bench.join_parts import MANIFEST, split_folder

SECTIONS = {"exactness", "syncs", "out_of_memory", "real_model", "step_cost"}


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return bare_interpreter.build(tmp_path_factory.mktemp("bare-site"))
    except OSError as err:  # Windows without the right to make symbolic links
        pytest.skip(f"cannot link the bare interpreter's packages here: {err}")


def _run(bare: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    argv, env = bare_interpreter.command(bare, *args)
    return subprocess.run(argv, env=env, cwd=bare_interpreter.REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "module", ["PySide6", "qasync", "gguf", "platformdirs", "bitsandbytes", "accelerate", "core.paths"]
)
def test_bare_interpreter_lacks_the_app_packages(bare: Path, module: str) -> None:
    proc = _run(bare, "-c", f"import {module}")
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


def test_the_algorithm_runtime_and_auto_import_in_the_bare_interpreter(bare: Path) -> None:
    """What a transformers user takes: lookahead decoding, and Auto's chooser with it."""
    code = (
        "from core.lookahead import lookahead_generate; from core.autotune import auto_lookahead; "
        "import core.runtime.prepared, core.runtime.compiled.step, core.autotune.calibration; print('ok')"
    )
    proc = _run(bare, "-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.fixture(scope="module")
def report(bare: Path, tiny_model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    """gpu_check --device cpu --tiny with a real (tiny) model folder split into parts, as it is carried."""
    model = tmp_path_factory.mktemp("carried") / "model"
    shutil.copytree(tiny_model_folder, model)
    assert split_folder(model, 4 << 20)
    out = tmp_path_factory.mktemp("gpu-check")
    # A generous budget: on a loaded CI machine no section may be cut short (no wall-clock limits in tests).
    proc = _run(
        bare,
        "-m",
        "core.bench.gpu_check",
        "--device",
        "cpu",
        "--tiny",
        "--out",
        str(out),
        "--model",
        str(model),
        "--time-budget",
        "3600",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "## Answers" in proc.stdout
    return json.loads((out / "gpu_check.json").read_text()), out, model


def test_every_section_is_reported(report) -> None:
    data, out, _ = report
    assert set(data["sections"]) == SECTIONS
    assert (out / "gpu_check.md").read_text().startswith("# GPU check: CPU")
    assert "not importable" in data["meta"]["bitsandbytes"]


def test_step_cost_curve_per_dtype(report) -> None:
    cost = report[0]["sections"]["step_cost"]
    assert cost["status"] == "ok"
    assert [r["mode"] for r in cost["rows"]] == ["fp16", "bf16"]
    assert any("4-bit and 8-bit skipped" in n for n in cost["notes"])
    for row in cost["rows"]:
        assert len(row["seconds"]) == len(cost["sizes"]) and cost["sizes"][0] == 1
        assert all(s > 0 for s in row["seconds"]) and row["ratio"][0] == 1.0


def test_lookahead_is_exact_in_fp32(report) -> None:
    exact = report[0]["sections"]["exactness"]
    fp32 = [r for r in exact["rows"] if r["dtype"] == "fp32"]
    assert [(r["config"], r["pool"]) for r in fp32] == [
        ("W4 N4 G4", "fresh"),
        ("W4 N4 G4", "seeded"),
        ("W7 N5 G7", "fresh"),
        ("W7 N5 G7", "seeded"),
    ]
    assert all(r["identical"] == r["prompts"] == 4 for r in fp32)
    assert all(r["tokens_per_step"] > 1.0 for r in fp32)
    assert all(r["tokens_per_step"] > 2.5 for r in fp32 if r["pool"] == "seeded")  # verification accepts on most steps
    assert fp32[0]["distinct_tokens"] > 16  # the random model does not just repeat a few tokens
    assert {r["dtype"] for r in exact["rows"]} == {"fp32", "fp16"}


def test_real_model_joined_and_measured(report) -> None:
    data, _, model = report
    real = data["sections"]["real_model"]
    assert real["status"] == "ok", real
    assert not (model / MANIFEST).exists() and (model / "model.safetensors").is_file()
    assert any(n.startswith("joined 1 split file") for n in real["notes"])
    rows = {r["method"]: r for r in real["rows"]}
    assert {"generate", "plain loop", "lookahead W5 N3 G5", "lookahead W15 N5 G15"} <= set(rows)
    assert len(rows) == 6 + (1 if real["auto"]["available"] else 0)
    for name, row in rows.items():
        assert row["identical_to_generate"] == f"{real['prompts_done']}/{real['prompts_done']}", name
        assert row["tokens_per_second"] > 0 and row["new_tokens"] > 0
    assert rows["plain loop"]["tokens_per_step"] == 1.0
    assert rows["generate"]["speedup_vs_generate"] == 1.0


def test_syncs_probe_ran_and_oom_is_cuda_only(report) -> None:
    sections = report[0]["sections"]
    assert [r["mode"] for r in sections["syncs"]["rows"]] == ["plain", "W4 N4 G4"]
    assert all(r["steps"] == 8 and not r["debug_mode"] for r in sections["syncs"]["rows"])
    assert sections["out_of_memory"]["status"] == "skipped"


@pytest.mark.parametrize("mode", ["nf4", "int8"])
def test_bitsandbytes_layers_replace_the_decoder_linears(mode: str) -> None:
    pytest.importorskip("bitsandbytes")
    reference = random_model(SHAPES["tiny"], "fp16", torch.device("cpu"))
    quantized = random_model(SHAPES["tiny"], mode, torch.device("cpu"))
    kinds = {type(m).__name__ for layer in quantized.model.layers for m in layer.modules()}
    assert "Linear" not in kinds and ("Linear4bit" if mode == "nf4" else "Linear8bitLt") in kinds
    assert weight_bytes(quantized) < weight_bytes(reference)
    ids = torch.arange(10, 40)[None]
    with torch.inference_mode():
        a = reference(input_ids=ids).logits.float()
        b = quantized(input_ids=ids).logits.float()
    assert torch.isfinite(b).all()
    assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.9


def test_quantize_rejects_unknown_modes() -> None:
    pytest.importorskip("bitsandbytes")
    with pytest.raises(ValueError, match="nf4 or int8"):
        quantize_linears(random_model(SHAPES["tiny"], "fp16", torch.device("cpu")), "fp8", torch.float16)
