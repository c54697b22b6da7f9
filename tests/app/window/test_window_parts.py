"""Conversation list, export, dialogs, settings and theme, live figures, offline mode, jobs on the worker, run_gui."""

from __future__ import annotations

import json
import os
import time

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog, QLabel, QMessageBox

from core.compare.record import Comparison
from core.engine.jobs import JobFailure, StepsJob
from core.progress import CancelToken
from core.settings import Settings


def test_new_rename_search_and_delete_conversations(tiny_settings, open_window, ui, monkeypatch) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    ui.send(window, "Packing list for a trip")
    first = window.chat.current_id
    window.shortcut_actions["new_chat"].trigger()
    assert window.chat.current_id is None and window.chat_view.messages == []
    ui.send(window, "Binary search in Python")
    second = window.chat.current_id
    assert set(window.history.ids()) == {first, second}

    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("Trip", True))
    window.rename_conversation(first)
    assert window.store.conversation(first).title == "Trip"

    window.history.search.setText("binary")
    ui.qtbot.waitUntil(lambda: window.history.ids() == [second], timeout=5000)
    window.history.search.setText("")
    ui.qtbot.waitUntil(lambda: len(window.history.ids()) == 2, timeout=5000)

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    window.delete_conversation(second)
    assert len(window.history.ids()) == 2
    comparisons = window.compare_page.store
    for conversation in (first, second):
        comparisons.save(
            Comparison(
                id=f"c{conversation}",
                created="2026-11-30T07:00:00",
                prompt="Binary search",
                system_prompt="",
                model="tiny",
                device="CPU",
                dtype="float32",
                lookahead="W3 N3 G3",
                max_new_tokens=8,
                repeats=1,
                conversation_id=str(conversation),
            )
        )
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    window.delete_conversation(second)
    assert window.history.ids() == [first]
    assert window.chat.current_id is None
    assert comparisons.list(str(second)) == [] and len(comparisons.list(str(first))) == 1


def test_export_markdown_and_json(tiny_settings, open_window, ui, tmp_path) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    ui.send(window, "Export me")
    conv = window.chat.current_id
    window.export_to(conv, "md", tmp_path / "chat.md")
    window.export_to(conv, "json", tmp_path / "chat.json")
    markdown = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert markdown.startswith("# Export me") and "## User\n\nExport me" in markdown
    data = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["mode"]
    window.export_to(conv, "md", tmp_path / "missing-dir" / "x" / "chat.md")  # folders are created
    window.export_to(conv, "md", tmp_path / "chat.json" / "bad.md")  # a file where a folder should be
    assert "Could not export" in window.notice.text


def test_theme_switch_and_dialogs(tiny_settings, open_window, qtbot) -> None:
    tiny_settings()
    window = open_window()
    window.apply_settings(Settings(**{**window.settings.current.__dict__, "theme": "dark"}))
    assert window.chat_view.renderer.palette.pygments_style == "monokai"
    assert (window.settings_store.load().settings.theme) == "dark"
    from app.window.dialogs import AboutDialog, HelpDialog

    help_dialog = HelpDialog(window)
    qtbot.addWidget(help_dialog)
    from app.window.shortcuts import SHORTCUTS

    assert help_dialog.table.rowCount() == len(SHORTCUTS)
    about = AboutDialog(window.model, window)
    qtbot.addWidget(about)
    assert "CPU" in about.label.text() and "transformers" in about.label.text()
    keys = {name: action.shortcut().toString() for name, action in window.shortcut_actions.items()}
    assert keys["new_chat"] == "Ctrl+N" and keys["stop"] == "Esc" and keys["settings"] == "Ctrl+,"


def test_live_figures_update_while_generating(tiny_settings, open_window, ui) -> None:
    import threading

    import torch

    tiny_settings(max_new_tokens=120, mode="plain")
    window = open_window()
    assert window._figures_timer.interval() <= 250

    def slow_step(module: torch.nn.Module, _args: tuple) -> None:  # 120 steps of 50 ms: still generating when checked
        if isinstance(module, torch.nn.Embedding) and threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(slow_step)
    try:
        ui.send(window, "Go on", wait=False)
        ui.qtbot.waitUntil(lambda: "tok/s" in window.figures.rate.text(), timeout=30_000)
        assert window.figures.state.text() in ("generating", "waiting for the model")
        assert "context" in window.figures.context.text()
        window.chat.stop()
        ui.wait_idle(window)
    finally:
        handle.remove()
    assert window.figures.state.text().startswith("last answer")


def test_gui_start_sets_hub_offline_mode(monkeypatch) -> None:
    from app.window.main import OFFLINE_ENVIRONMENT, enable_offline_mode

    for name in OFFLINE_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    enable_offline_mode()
    assert all(os.environ[name] == "1" for name in OFFLINE_ENVIRONMENT)


def test_other_modes_run_jobs_on_the_model_worker(tiny_settings, open_window, qtbot) -> None:
    import threading

    tiny_settings()
    window = open_window()
    seen: list[tuple[str, str]] = []
    failures: list[JobFailure] = []

    class Listener:
        def yielded(self, steps: list) -> None:
            seen.extend(steps)

        def errored(self, failure: JobFailure) -> None:
            failures.append(failure)

        def aborted(self) -> None: ...

        def finished(self) -> None: ...

    def failing(ready):
        yield 1 / 0

    window.worker.run_job(
        StepsJob(lambda ready: iter([(threading.current_thread().name, ready.loaded.name)]), Listener(), CancelToken())
    )
    window.worker.run_job(
        StepsJob(failing, Listener(), CancelToken(), "The test job")
    )  # reported; the worker keeps going
    window.worker.run_job(StepsJob(lambda ready: iter([("after", "")]), Listener(), CancelToken()))
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=10_000)
    assert seen[0][0] == "model-thread" and seen[0][1] == window.model.name
    assert [f.kind for f in failures] == ["unexpected"] and "ZeroDivisionError" in failures[0].message
    index = window.add_page(QLabel("compare"))
    assert window.pages.widget(index).text() == "compare" and window.pages.currentIndex() == 0
    action = QAction("Compare", window)
    window.add_toolbar_action(action)
    assert action in window.toolbar.actions()


def test_run_gui_runs_on_qasync_offline_and_quits(tiny_settings, app_paths, tmp_path) -> None:
    import subprocess
    import sys

    tiny_settings(max_new_tokens=8)
    script = f"""
import asyncio
import sys
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.window.main import run_gui
from core.paths import AppPaths

app = QApplication(sys.argv)

async def report_and_close():
    # Runs as an asyncio task: only possible when the Qt event loop is also an asyncio loop (qasync).
    await asyncio.sleep(0)
    print("asyncio loop", type(asyncio.get_running_loop()).__module__.split(".")[0], flush=True)
    app.closeAllWindows()

def close_when_ready():
    windows = [w for w in app.topLevelWidgets() if type(w).__name__ == "MainWindow"]
    if windows and windows[0].model is not None and timer.isActive():
        timer.stop()
        import huggingface_hub.constants as constants
        print("offline", constants.HF_HUB_OFFLINE, flush=True)
        asyncio.ensure_future(report_and_close())

timer = QTimer(interval=100)
timer.timeout.connect(close_when_ready)
timer.start()
code = run_gui(AppPaths(Path({str(app_paths.config_dir)!r}), Path({str(app_paths.data_dir)!r}), Path({str(app_paths.cache_dir)!r})))
print("exit", code)
"""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "offline True" in done.stdout and "exit 0" in done.stdout
    assert "asyncio loop qasync" in done.stdout  # the window's event loop runs asyncio tasks


def test_help_shows_every_shortcut_whole_without_scrolling(qtbot) -> None:
    from app.window.dialogs import HelpDialog

    dialog = HelpDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    table = dialog.table
    assert not table.horizontalScrollBar().isVisible() and not table.verticalScrollBar().isVisible()
    for column in range(table.columnCount()):  # no text cut short: each column as wide as its longest text
        assert table.columnWidth(column) >= table.sizeHintForColumn(column)
    assert table.rowViewportPosition(table.rowCount() - 1) + table.rowHeight(0) <= table.viewport().height()


def test_a_first_start_on_the_default_offers_a_catalog_model_once(open_window, app_paths) -> None:
    from core.models.catalog import suggested_model
    from core.runtime.memory import system_memory
    from core.settings import SettingsStore

    memory = system_memory()
    offered = suggested_model(memory.total if memory else None)
    first = open_window()
    assert SettingsStore(app_paths.config_dir).load().settings.catalog_offered
    if offered is not None:
        assert offered.name in first.notice.text and f"lookahead-chat fetch {offered.id}" in first.notice.text
    first.close()
    second = open_window()
    assert "fetch" not in second.notice.text
