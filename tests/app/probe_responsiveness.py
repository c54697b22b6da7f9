"""Responsiveness probe (a benchmark, not a unit test): the GUI thread's largest stall while the model works.

Usage: python tests/app/probe_responsiveness.py [SECONDS] [MODE]

Opens the real window with the default model, starts a long answer, and runs a 10 ms QTimer on the
GUI thread; reports the largest gap between ticks (target: under 100 ms) during generation, how
long Stop takes to return the window to idle (target: under 1 s) and how long closing the window
mid-answer takes (target: under 2 s). These are timings of a real machine, so they live here and
not in the unit tests.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.window.main import enable_offline_mode, leave

log = logging.getLogger("probe")
PROMPT = (
    "Write a detailed Python tutorial about sorting algorithms with code for bubble sort, merge sort and quicksort."
)


def main(seconds: float, mode: str) -> int:
    enable_offline_mode()
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    from app.window.main_window import MainWindow
    from core.paths import AppPaths
    from core.settings import SamplingSettings, Settings, SettingsStore

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = QApplication.instance() or QApplication(sys.argv)
    real = AppPaths.default()
    with tempfile.TemporaryDirectory(prefix="lookahead-probe-") as tmp:
        paths = AppPaths(Path(tmp) / "config", Path(tmp) / "data", real.cache_dir).ensure()
        SettingsStore(paths.config_dir).save(Settings(sampling=SamplingSettings(max_new_tokens=2048), mode=mode))
        window = MainWindow(paths)
        window.resize(1280, 800)
        window.show()
        gaps: list[float] = []
        clock = QElapsedTimer()
        state = {"phase": "loading", "began": 0.0, "stop_pressed": 0.0, "stop_seconds": 0.0}

        def tick() -> None:
            if state["phase"] == "generating" and clock.isValid():
                gaps.append(clock.nsecsElapsed() / 1e6)
            clock.restart()
            if state["phase"] == "loading" and window.model is not None:
                state["phase"] = "generating"
                state["began"] = time.monotonic()
                window.composer.box.setPlainText(PROMPT)
                window.composer.submit()
            elif state["phase"] == "generating" and (
                time.monotonic() - state["began"] > seconds or not window.chat.busy
            ):
                state["phase"] = "stopping"
                state["stop_pressed"] = time.monotonic()
                window.chat.stop()
            if state["phase"] == "stopping" and not window.chat.busy:
                state["phase"] = "done"
                state["stop_seconds"] = time.monotonic() - state["stop_pressed"]
                window.composer.box.setPlainText(PROMPT)
                window.composer.submit()  # a second answer, for the close below to interrupt
                QTimer.singleShot(500, app.quit)

        timer = QTimer(interval=10)
        timer.timeout.connect(tick)
        timer.start()
        app.exec()
        outcome = window.last_outcome
        closing = time.monotonic()
        window.close()
        close_seconds = time.monotonic() - closing
    if not gaps:
        log.error("no generation happened (model not loaded?)")
        return 1
    figures = outcome.figures if outcome else None
    print(
        f"responsiveness: {len(gaps)} ticks over {sum(gaps) / 1000:.1f} s of generation ({mode}); "
        f"largest gap {max(gaps):.1f} ms, 99th percentile {statistics.quantiles(gaps, n=100)[98]:.1f} ms, "
        f"median {statistics.median(gaps):.1f} ms (timer interval 10 ms)"
        + (f"; answer {figures.new_tokens} tokens at {figures.tokens_per_second:.1f} tok/s" if figures else ""),
        flush=True,
    )
    print(
        f"stop to idle: {state['stop_seconds'] * 1000:.0f} ms (target under 1000 ms); "
        f"closing mid-answer: {close_seconds * 1000:.0f} ms (target under 2000 ms)",
        flush=True,
    )
    return leave(window)


if __name__ == "__main__":
    raise SystemExit(
        main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0, sys.argv[2] if len(sys.argv) > 2 else "lookahead")
    )
