"""Render the documentation screenshots with the real default model (run by `make screenshots`).

Usage: python tests/app/screenshots.py OUT_DIR   (under Xvfb, or any display)

Writes main-light.png and main-dark.png (mid-answer with a code block), settings.png and
model-download.png (a first-run fetch of the default model into an empty cache).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app.window.main import enable_offline_mode, leave

log = logging.getLogger("screenshots")
PROMPT = "Write a Python function that checks whether a string is a palindrome, then show how to call it."


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Run the Qt event loop until ``condition()`` or ``timeout`` seconds."""
    from PySide6.QtWidgets import QApplication

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        QApplication.processEvents()
        if condition():
            return True
        time.sleep(0.02)
    return False


def settle(seconds: float = 0.4) -> None:
    wait_until(lambda: False, seconds)


def past_code_block(window, chars: int) -> bool:
    """True once the streaming answer has a closed code block and ``chars`` more characters."""
    live = window.chat.live
    if live is None or live.text.count("```") < 2:
        return False
    return len(live.text.split("```", 2)[2]) >= chars


def main(out: Path) -> int:
    enable_offline_mode()
    os.environ["PIP_NO_CACHE_DIR"] = "1"  # show a real download, not pip's cached copy
    from PySide6.QtWidgets import QApplication

    from app.settings.dialog import SettingsDialog
    from app.window.main_window import MainWindow
    from core.paths import AppPaths
    from core.settings import SamplingSettings, Settings, SettingsStore

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out.mkdir(parents=True, exist_ok=True)
    _app = QApplication.instance() or QApplication(sys.argv)
    real = AppPaths.default()
    with tempfile.TemporaryDirectory(prefix="lookahead-shots-") as tmp:
        paths = AppPaths(Path(tmp) / "config", Path(tmp) / "data", real.cache_dir).ensure()
        settings = Settings(sampling=SamplingSettings(max_new_tokens=400), theme="light", mode="auto")
        SettingsStore(paths.config_dir).save(settings)
        window = MainWindow(paths)
        window.resize(1280, 800)
        window.show()
        if not wait_until(lambda: window.model is not None, 180):
            log.error("the default model did not load: %s", window.load_panel.label.text())
            return 1
        window.settings.update(sampling=SamplingSettings(max_new_tokens=32))
        window.composer.box.setPlainText("Suggest a packing list for a weekend hike.")
        window.composer.submit()
        wait_until(lambda: not window.chat.busy, 300)
        window.new_chat()
        window.settings.update(sampling=SamplingSettings(max_new_tokens=400))
        window.composer.box.setPlainText(PROMPT)
        window.composer.submit()
        if not wait_until(lambda: past_code_block(window, 60) or not window.chat.busy, 600) or not window.chat.busy:
            log.warning("the answer ended before a code block and more text streamed; the screenshots show it finished")
        settle()
        window.grab().save(str(out / "main-light.png"))
        window.apply_settings(replace(window.settings.current, theme="dark"))
        settle()
        window.grab().save(str(out / "main-dark.png"))
        window.chat.stop()
        wait_until(lambda: not window.chat.busy, 30)
        window.apply_settings(replace(window.settings.current, theme="light"))

        dialog = SettingsDialog(window.settings.current, paths, window)
        dialog.show()
        settle()
        dialog.grab().save(str(out / "settings.png"))
        dialog.reject()
        window.close()

        empty_cache = AppPaths(Path(tmp) / "config2", Path(tmp) / "data2", Path(tmp) / "cache").ensure()
        first_run = MainWindow(empty_cache)
        first_run.resize(1280, 800)
        first_run.show()
        panel = first_run.load_panel
        wait_until(
            lambda: (
                (panel.label.text().startswith("Downloading") and panel.progress.value() >= 60)
                or panel.retry.isVisible()
            ),
            180,
        )
        settle()
        first_run.grab().save(str(out / "model-download.png"))
        first_run.close()
    log.info("screenshots written to %s", out)
    return leave(first_run)


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")))
