"""The headless command line: real sub-processes of `lookahead-chat` and app.cli.main in-process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from app.cli import main
from core.models.registry import REGISTRY_FILE
from core.runtime.compiled import kernels

ROOT = Path(__file__).resolve().parents[2]
ENTRY = Path(sys.executable).parent / "lookahead-chat"


def cli(*args: str, home: Path, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    """Run the installed entry point (or `python -m app` from a bare checkout) with its own home."""
    command = [str(ENTRY)] if ENTRY.exists() else [sys.executable, "-m", "app"]
    env = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(home)}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fresh config and data folders for in-process runs too."""
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path))
    return tmp_path


def test_ask_prints_an_answer(default_model_folder: Path, tmp_path: Path) -> None:
    proc = cli("ask", "Write a haiku about rain", "--max-new-tokens", "24", "--mode", "plain", "--stats", home=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = proc.stdout.strip()
    assert len(answer.split()) >= 5, answer
    assert "<|im" not in answer and "\ufffd" not in answer
    assert any(w in answer.lower() for w in ("rain", "drop", "cloud", "storm", "sky", "wet", "pour")), answer
    assert "tokens/step (plain; " in proc.stderr
    print(f"\nask answered: {answer!r}")


def test_self_test_passes(default_model_folder: Path, tmp_path: Path) -> None:
    proc = cli("--self-test", home=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "self-test passed: SmolLM2-135M-Instruct" in proc.stdout


def test_fetch_default_when_cached(default_model_folder: Path, tmp_path: Path) -> None:
    proc = cli("fetch-default", home=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Default model already cached" in proc.stdout
    assert "Downloading" not in proc.stderr


def test_models_lists_known_models(default_model_folder: Path, home: Path, tiny_model_folder: Path, capsys) -> None:
    (home / "data").mkdir()
    (home / "data" / REGISTRY_FILE).write_text(
        json.dumps(
            [{"kind": "folder", "location": str(tiny_model_folder)}, {"kind": "hub", "location": "owner/remote"}]
        )
    )
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].split()[:3] == ["SmolLM2-135M-Instruct", "default", "ready"] and "embedded default" in lines[0]
    assert lines[1].split()[1:3] == ["folder", "ready"] and str(tiny_model_folder) in lines[1]
    assert lines[2].split()[:4] == ["remote", "hub", "not", "downloaded"]


def test_models_subprocess(default_model_folder: Path, tmp_path: Path) -> None:
    proc = cli("models", home=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[:3] == ["SmolLM2-135M-Instruct", "default", "ready"]


def test_ask_with_a_local_folder_in_lookahead_mode(tiny_model_folder: Path, home: Path, capsys) -> None:
    args = ["ask", "Hello", "--model", str(tiny_model_folder), "--device", "cpu", "--dtype", "fp32"]
    assert main([*args, "--mode", "lookahead", "--max-new-tokens", "12", "--stats"]) == 0
    out = capsys.readouterr()
    assert out.out.endswith("\n") and "12 tokens" in out.err and "W" in out.err and "N" in out.err
    # the random tiny model babbles, but plain and lookahead greedy decoding babble the same
    assert main([*args, "--mode", "plain", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == out.out


def test_ask_missing_model_is_a_clean_error(home: Path, tmp_path: Path, capsys) -> None:
    assert main(["ask", "hi", "--model", str(tmp_path / "no-such-model")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: The model folder") and "does not exist" in err and "Traceback" not in err


def test_ask_cuda_absent_is_a_clean_error(tiny_model_folder: Path, home: Path, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a usable CUDA GPU, so the error cannot happen here")
    assert main(["ask", "hi", "--model", str(tiny_model_folder), "--device", "cuda"]) == 1
    assert "error: CUDA was asked for" in capsys.readouterr().err


def test_ask_too_many_new_tokens_is_a_clean_error(tiny_model_folder: Path, home: Path, capsys) -> None:
    # the tiny model's context is 1024 tokens
    assert main(["ask", "hi", "--model", str(tiny_model_folder), "--device", "cpu", "--max-new-tokens", "1020"]) == 1
    err = capsys.readouterr().err
    assert "error: max new tokens (1020) leaves no room" in err
    assert "Measuring" not in err  # said at once, before Auto's measurement


def test_bundled_pip_passthrough(capsys) -> None:
    """The frozen app runs its bundled pip as `lookahead-chat _pip ...` (pip may exit by SystemExit)."""
    try:
        code = main(["_pip", "--version"])
    except SystemExit as exit_:
        code = exit_.code or 0
    assert code == 0
    assert capsys.readouterr().out.startswith("pip ")


def test_unknown_command_exits_with_usage(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["frobnicate"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["ask", "Count from 1 to 100.", "--max-new-tokens", "0"],
            "argument --max-new-tokens: must be between 1 and 32768 (got 0)",
        ),
        (["ask", "hi", "--max-new-tokens", "-5"], "argument --max-new-tokens: must be between 1 and 32768 (got -5)"),
        (
            ["ask", "hi", "--max-new-tokens", "many"],
            "argument --max-new-tokens: give a whole number of tokens (got 'many')",
        ),
        (["ask", ""], "argument prompt: the prompt is empty"),
        (["ask", "  \n "], "argument prompt: the prompt is empty"),
        (["bench", "--max-new-tokens", "0"], "argument --max-new-tokens: must be between 1 and 32768 (got 0)"),
    ],
)
def test_bad_arguments_are_refused_before_any_model_loads(
    args: list[str], message: str, home: Path, tmp_path: Path, capsys
) -> None:
    # the model does not exist: reaching the load would print that error instead, with exit code 1
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--model", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "does not exist" not in err


def test_quality_prints_perplexity_per_quantization(tiny_model_folder: Path, home: Path, capsys) -> None:
    assert (
        main(["quality", "--model", str(tiny_model_folder), "--device", "cpu", "--quantizations", "none,8bit,4bit"])
        == 0
    )
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "perplexity" not in line]
    names = [row.split("|")[1].strip() for row in rows]
    activations = f"int{kernels.activation_bits()} activations" if kernels.supported() else "weight-only"
    assert names == ["none", "8bit", f"8bit, compiled steps ({activations})", "4bit"]  # as decoding computes it
    assert rows[0].split("|")[2].strip() == "float32" and rows[1].split("|")[2].strip() == "bfloat16"
    values = [float(row.split("|")[3]) for row in rows]
    assert all(value > 1 for value in values)
    assert abs(values[2] / values[1] - 1) < 0.05  # the compiled int8 steps score the text as the eager ones do


@pytest.mark.parametrize(
    "args", [["quality", "--quantizations", "3bit"], ["bench", "--peers", "llama.cpp", "--precisions", "fp8"]]
)
def test_bad_quality_and_peer_options_are_clean_errors(args: list[str], home: Path, capsys) -> None:
    assert main(args) == 1
    assert capsys.readouterr().err.startswith("error: --")


def test_piped_the_answer_ends_its_line_before_the_statistics(tiny_model_folder: Path, tmp_path: Path) -> None:
    command = [str(ENTRY)] if ENTRY.exists() else [sys.executable, "-m", "app"]
    env = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(tmp_path)}
    env.pop("PYTHONUNBUFFERED", None)  # a pipe is block-buffered for the user
    args = [
        "ask",
        "hi",
        "--model",
        str(tiny_model_folder),
        "--device",
        "cpu",
        "--mode",
        "plain",
        "--max-new-tokens",
        "6",
        "--stats",
    ]
    proc = subprocess.run(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=180, cwd=ROOT
    )  # one pipe for both, as `ask ... 2>&1 | tee` gives
    assert proc.returncode == 0, proc.stdout[-3000:]
    stats = [line for line in proc.stdout.splitlines() if "tokens/step (plain; " in line]
    assert len(stats) == 1 and stats[0].startswith("6 tokens, "), proc.stdout[-1000:]
    assert proc.stdout.endswith(stats[0] + "\n"), proc.stdout[-300:]  # the answer's own last newline came before it


def test_serve_refuses_a_busy_port_before_the_model_loads(home: Path, tmp_path: Path, capsys) -> None:
    with socket.socket() as busy:  # another program listening on the port
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # the model does not exist: reaching the load (and the ~20 s of calibration after it) would say so
        assert main(["serve", "--model", str(tmp_path / "no-such-model"), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the server could not listen on 127.0.0.1:{port} (")
    assert "--port" in err and "does not exist" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("occupied", ["folder", "file"])
def test_export_refuses_an_unusable_out_before_the_model_loads(
    occupied: str, home: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    if occupied == "folder":
        out.mkdir()
        (out / "mine.txt").write_text("keep me")
    else:
        out.write_text("keep me")
    assert main(["export-model", "--model", str(tmp_path / "no-such-model"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: The export folder {out} ") and "does not exist" not in err
    assert "new folder" in err and len(err.splitlines()) == 1
    assert (out / "mine.txt" if occupied == "folder" else out).read_text() == "keep me"


def test_a_folder_without_tokenizer_is_one_short_error(tiny_model_folder: Path, home: Path, tmp_path: Path, capsys):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_folder / name, folder / name)
    assert main(["ask", "hi", "--model", str(folder), "--device", "cpu"]) == 1
    message = capsys.readouterr().err.split("error: ", 1)[1]
    assert message.count("\n") == 1 and message.endswith("\n")  # one line (the library's own text ran to 6)
    assert len(message) < 200 + len(str(folder)) and "Add the model's tokenizer files" in message


def test_a_home_that_is_a_file_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    home = tmp_path / "passwd"
    home.write_text("root:x:0:0")
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(home))
    assert main(["ask", "hi", "--model", str(tmp_path / "no-such-model")]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"error: Lookahead Chat cannot create its folder {home / 'config'}: {home} is a file, not a folder. "
        "Point LOOKAHEAD_CHAT_HOME at a folder, or unset it.\n"
    )
    assert home.read_text() == "root:x:0:0"


def test_quality_on_a_model_that_cannot_chat_prints_only_the_error(home: Path, tmp_path: Path, capsys) -> None:
    from transformers import BertConfig

    folder = tmp_path / "bert"
    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(folder)
    assert main(["quality", "--model", str(folder), "--device", "cpu"]) == 1
    out = capsys.readouterr()
    assert out.out == ""  # no table header above the error
    assert out.err.splitlines()[-1].startswith("error: The model is a 'bert', not a decoder-only causal")


def test_ask_with_a_100_mb_system_prompt_in_the_settings_answers_with_a_warning(
    tiny_model_folder: Path, home: Path, caplog
) -> None:
    """Issue 28: accepted silently, the 100 MB prompt took minutes to tokenize before any answer."""
    (home / "config").mkdir()
    (home / "config" / "settings.json").write_text(json.dumps({"system_prompt": "Be brief. " * 10_000_000}))
    args = ["ask", "hi", "--model", str(tiny_model_folder), "--device", "cpu", "--mode", "plain"]
    assert main([*args, "--max-new-tokens", "4"]) == 0
    [warning] = [r for r in caplog.records if r.name == "core.settings"]  # on stderr, outside pytest
    message = warning.getMessage()
    assert message.startswith("The settings file could not be used (the system prompt has 100,000,000 characters")
    assert "Default settings are in effect" in message


def test_the_longest_system_prompt_ends_an_answer_quickly_with_a_clear_error(
    tiny_model_folder: Path, home: Path, capsys
) -> None:
    from core.settings import MAX_SYSTEM_PROMPT, Settings, SettingsStore

    SettingsStore(home / "config").save(Settings(system_prompt="Be brief. " * (MAX_SYSTEM_PROMPT // 10)))
    start = time.perf_counter()
    args = ["ask", "hi", "--model", str(tiny_model_folder), "--device", "cpu", "--mode", "plain"]
    assert main([*args, "--max-new-tokens", "4"]) == 1
    assert time.perf_counter() - start < 60  # about 5 s here, load included
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: The message is too long for the model's context")


def test_fetch_lists_the_catalog_and_a_catalog_id_not_fetched_says_how(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_CACHE", str(tmp_path / "empty-cache"))  # nothing fetched there
    assert main(["fetch", "--list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert all("not fetched" in row and "Apache-2.0" in row for row in rows)
    assert main(["fetch", "qwen-9000"]) == 1
    assert "'qwen-9000' is not in the catalog" in capsys.readouterr().err
    assert main(["ask", "hi", "--model", "qwen2.5-coder-1.5b"]) == 1
    err = capsys.readouterr().err
    assert "Qwen2.5-Coder-1.5B-Instruct is not on this computer yet" in err
    assert "lookahead-chat fetch qwen2.5-coder-1.5b" in err and "Traceback" not in err
