"""The command line never shows a traceback: any failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from app.cli import main
from core.chat.prompt import SYSTEM_FOLDED_NOTE


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def failing_forward():
    """Every forward pass of a causal LM raises a library error that is not a ValueError."""

    def hook(module: torch.nn.Module, _args: tuple) -> None:
        if isinstance(module, torch.nn.Embedding):
            raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    yield
    handle.remove()


def test_a_failure_while_answering_is_one_line_and_exit_1(
    tiny_model_folder: Path, home: Path, failing_forward, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_CACHE", str(home / "cache"))  # no stored calibration: the answer runs first
    code = main(
        ["ask", "hi", "--model", str(tiny_model_folder), "--device", "cpu", "--dtype", "fp32", "--max-new-tokens", "4"]
    )
    assert code == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last == (
        "error: The answer stopped because of an error (RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED). Try again; "
        "if it happens again, check the settings (sampling, seed) or choose another model in Settings."
    )
    assert "Traceback" not in err


def test_a_failure_in_another_command_is_one_line_too(
    tiny_model_folder: Path, home: Path, failing_forward, capsys
) -> None:
    code = main(["tune", "--model", str(tiny_model_folder), "--device", "cpu", "--dtype", "fp32", "--prompts", "1"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error: The command stopped because of an error (RuntimeError")
    assert "Traceback" not in err


def test_a_template_without_system_role_answers_with_a_note(
    tiny_model_folder: Path, home: Path, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "no-system-role"
    shutil.copytree(tiny_model_folder, folder)
    (folder / "chat_template.jinja").write_text(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert (
        main(["ask", "hi", "--model", str(folder), "--device", "cpu", "--dtype", "fp32", "--max-new-tokens", "4"]) == 0
    )
    out = capsys.readouterr()
    assert f"note: {SYSTEM_FOLDED_NOTE}" in out.err and out.out.endswith("\n")


def test_warnings_on_the_terminal_carry_no_traceback_unless_verbose() -> None:
    from app.cli import LOG_FORMAT, OneLineFormatter

    try:
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")
    except RuntimeError:
        import sys

        record = logging.LogRecord(
            "core.autotune.prepare", logging.WARNING, __file__, 1, "measuring failed: %s", ("boom",), sys.exc_info()
        )
    line = OneLineFormatter(LOG_FORMAT).format(record)
    assert line == "WARNING core.autotune.prepare: measuring failed: boom (the details: run it again with --verbose)"
    assert "Traceback" in logging.Formatter(LOG_FORMAT).format(
        record
    )  # --verbose: the whole story, the record untouched
    record.exc_info = record.exc_text = None  # a warning without a traceback: no hint
    assert OneLineFormatter(LOG_FORMAT).format(record) == "WARNING core.autotune.prepare: measuring failed: boom"
