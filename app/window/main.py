"""Start the GUI: hub offline mode first, then Qt on a qasync event loop."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from core.paths import AppPaths

log = logging.getLogger(__name__)

OFFLINE_ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def enable_offline_mode() -> None:
    """No network calls from the hub libraries unless the user asks for a download.

    Must run before ``transformers`` or ``huggingface_hub`` are imported: they read it once.
    """
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ[name] = value
    for module in ("transformers", "huggingface_hub"):
        if module in sys.modules:
            log.warning("%s was imported before offline mode was set", module)


def run_gui(paths: AppPaths) -> int:
    """Show the main window and run the Qt event loop under qasync until it closes.

    Refused with one line (exit code 1) when Qt's X11 libraries are missing; a second start over
    the same data folder brings the first window to the front and exits (see app.window.single_instance).
    """
    from app.window.system_libraries import (
        missing_xcb_message,
    )  # before Qt loads: it names the libraries Qt would fail on

    problem = missing_xcb_message()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    enable_offline_mode()
    import qasync  # Qt and the window load only after the check for its system libraries
    from PySide6.QtWidgets import QApplication

    from app.window.gc_guard import GuiThreadCollector
    from app.window.main_window import MainWindow
    from app.window.single_instance import InstanceLock, second_start_message

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Lookahead Chat")
    app.setDesktopFileName("lookahead-chat")
    lock = InstanceLock(paths.data_dir)
    if not lock.acquire():
        message, code = second_start_message(lock)
        print(message, file=sys.stderr if code else sys.stdout)
        return code
    window = MainWindow(paths)
    lock.activated.connect(window.bring_to_front)
    collector = GuiThreadCollector(busy=lambda: window.chat.busy, parent=app)
    window.show()

    async def until_closed() -> None:
        closed = asyncio.Event()
        app.aboutToQuit.connect(closed.set)
        await closed.wait()

    qasync.run(until_closed())
    collector.stop()
    lock.release()
    return leave(window)


def leave(window) -> int:
    """Exit code after the window closed. The history is saved and closed by then; if the worker
    is still inside a long decoding step, exit without waiting for it (a daemon thread inside
    torch must not meet interpreter shutdown)."""
    if window.worker.running:
        log.warning("the model worker is still in a decoding step; exiting without waiting for it")
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
