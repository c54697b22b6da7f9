"""A worker that cannot die: any job's failure ends that job with a message, the window goes idle, the worker serves on."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.chat.prompt import SYSTEM_FOLDED_NOTE
from core.engine.jobs import OOM_ADVICE, StepsJob
from core.models.options import ModelSource
from core.progress import CancelToken
from core.settings import SettingsStore

GEMMA_STYLE_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture
def gemma_style_folder(tiny_model_folder: Path, tmp_path: Path) -> Path:
    """The tiny model with a chat template that refuses the system role, as several real models ship."""
    folder = tmp_path / "no-system-role"
    shutil.copytree(tiny_model_folder, folder)
    (folder / "chat_template.jinja").write_text(GEMMA_STYLE_TEMPLATE)
    return folder


@pytest.fixture
def forward_pre_hook() -> Iterator:
    """Install ``action()`` before every forward pass (each embeds its tokens once) on any thread but this one."""
    handles = []
    me = threading.current_thread()

    def install(action) -> None:
        def hook(module: torch.nn.Module, _args: tuple) -> None:
            if threading.current_thread() is not me and isinstance(module, torch.nn.Embedding):
                action()

        handles.append(torch.nn.modules.module.register_module_forward_pre_hook(hook))

    yield install
    for handle in handles:
        handle.remove()


def test_a_template_without_system_role_answers_with_a_note(
    tiny_settings, gemma_style_folder, app_paths, open_window, ui
) -> None:
    settings = tiny_settings(max_new_tokens=8, system_prompt="Answer in French.")
    SettingsStore(app_paths.config_dir).save(replace(settings, source=ModelSource("folder", str(gemma_style_folder))))
    window = open_window()
    ui.send(window, "Hello")
    answer = ui.stored(window)[-1]
    assert answer.status == "truncated" and answer.stats["new_tokens"] > 0
    assert SYSTEM_FOLDED_NOTE in window.chat_view.messages[-1].note.text()
    assert window.worker.running and not window.chat.busy


def test_a_bad_seed_that_got_past_validation_ends_the_answer_not_the_worker(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    sampling = window.settings.current.sampling
    object.__setattr__(sampling, "temperature", 0.7)
    object.__setattr__(sampling, "seed", "abc")  # as a hand-edited file might deliver it
    ui.send(window, "Hello")
    answer = ui.stored(window)[-1]
    assert answer.status == "interrupted"
    notice = window.notice.text
    # torch's own words today ("RuntimeError: manual_seed expected a long"), with what to try
    assert notice.startswith("The answer stopped because of an error (") and "seed" in notice
    assert window.composer.button.text() == "Send" and window.worker.running
    object.__setattr__(sampling, "seed", 7)
    ui.send(window, "Hello again")  # the same worker serves the next answer
    assert ui.stored(window)[-1].status == "truncated"


def test_stop_returns_the_window_to_idle_while_the_worker_is_busy_elsewhere(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    release = threading.Event()

    class Quiet:
        def yielded(self, steps: list) -> None: ...
        def errored(self, failure) -> None: ...
        def aborted(self) -> None: ...
        def finished(self) -> None: ...

    def long_job(_loaded) -> Iterator[int]:
        release.wait(60)
        yield 1

    window.worker.run_job(StepsJob(long_job, Quiet(), CancelToken()))  # e.g. a comparison holding the model
    ui.send(window, "Hello", wait=False)
    window.composer.button.click()  # Stop
    ui.qtbot.waitUntil(lambda: not window.chat.busy, timeout=5_000)
    assert ui.stored(window)[-1].status == "stopped"
    assert window.composer.button.text() == "Send"
    release.set()
    ui.send(window, "Hello again")  # the skipped job left nothing behind
    assert ui.stored(window)[-1].status == "truncated"


def test_out_of_memory_in_a_comparison_gets_the_same_advice(
    tiny_settings, open_window, forward_pre_hook, qtbot
) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    page = window.compare_page

    def out_of_memory() -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    forward_pre_hook(out_of_memory)
    page.max_tokens.setValue(8)
    page.start()
    qtbot.waitUntil(lambda: not page.runner.busy, timeout=60_000)
    assert page.status.text() == f"The comparison stopped: {OOM_ADVICE}"
    assert page.compare_button.isEnabled() and not page.stop_button.isEnabled()
