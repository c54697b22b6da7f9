"""Helpers for driving the real main window with the tiny model (offscreen)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.settings import SamplingSettings, Settings, SettingsStore

LOAD_TIMEOUT_MS = 60_000
ANSWER_TIMEOUT_MS = 60_000


@pytest.fixture(autouse=True)
def collect_qt_garbage_on_the_gui_thread() -> Iterator[None]:
    """Collect each test's dead windows here, on the GUI thread.

    Python's cyclic GC runs in whichever thread happens to allocate; left to chance, a later test's
    model thread can end up destroying an earlier test's widgets, and Qt crashes (seen once as
    a segfault inside json.loads on the worker thread).
    """
    yield
    gc.collect()


def write_settings(paths: AppPaths, tiny_model_folder: Path, **changes) -> Settings:
    sampling = changes.pop("sampling", None) or SamplingSettings(max_new_tokens=changes.pop("max_new_tokens", 24))
    settings = Settings(
        source=ModelSource("folder", str(tiny_model_folder)),
        load=LoadOptions(device="cpu", dtype="fp32"),
        sampling=sampling,
        **changes,
    )
    SettingsStore(paths.config_dir).save(settings)
    return settings


@pytest.fixture
def tiny_settings(app_paths: AppPaths, tiny_model_folder: Path) -> Callable[..., Settings]:
    """Write settings that load the tiny model on the CPU; keyword arguments override fields."""
    return lambda **changes: write_settings(app_paths, tiny_model_folder, **changes)


@pytest.fixture
def open_window(qtbot, app_paths: AppPaths) -> Iterator[Callable[..., object]]:
    """Open a main window over ``app_paths`` (waiting for the model unless told not to); closed at teardown."""
    from app.window.main_window import MainWindow

    windows: list[MainWindow] = []

    def open_(wait_for_model: bool = True) -> MainWindow:
        window = MainWindow(app_paths)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        if wait_for_model:
            qtbot.waitUntil(lambda: window.model is not None, timeout=LOAD_TIMEOUT_MS)
        return window

    yield open_
    for window in windows:
        if window.worker.running:
            window.close()


class UI:
    """What a user does in the window, and what the tests wait for."""

    def __init__(self, qtbot) -> None:
        self.qtbot = qtbot

    def send(self, window, text: str, wait: bool = True) -> None:
        """Type ``text`` and press Enter."""
        window.composer.box.setPlainText(text)
        self.qtbot.keyClick(window.composer.box, Qt.Key.Key_Return)
        assert window.chat.busy
        if wait:
            self.wait_idle(window)

    def wait_idle(self, window) -> None:
        self.qtbot.waitUntil(lambda: not window.chat.busy, timeout=ANSWER_TIMEOUT_MS)

    def wait_text(self, window) -> None:
        """Until the answer being generated has some text."""
        self.qtbot.waitUntil(
            lambda: window.chat.live is not None and bool(window.chat.live.text), timeout=ANSWER_TIMEOUT_MS
        )

    @staticmethod
    def stored(window) -> list:
        """The current conversation's messages as saved."""
        return window.store.messages(window.chat.current_id)


@pytest.fixture
def ui(qtbot) -> UI:
    return UI(qtbot)
