"""A model download on its own thread (it never touches the loaded model), with progress and cancel: a hub
repo or a catalog model's parts."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from core.models.errors import ModelError
from core.progress import CancelToken, ProgressCallback

log = logging.getLogger(__name__)

DownloadWork = Callable[[ProgressCallback, CancelToken], Path]
"""What a download runs: reports progress, honours the token, returns where the model now lies."""


class Download(QObject):
    """Runs ``work`` for the model called ``label`` on a thread; signals arrive on the GUI thread."""

    progress = Signal(str, float)
    finished = Signal(str)  # where the model lies
    failed = Signal(str)

    def __init__(self, label: str, work: DownloadWork, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.label = label
        self.token = CancelToken()
        self._work = work
        self._thread = threading.Thread(target=self._run, name="model-download", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self.token.cancel()

    def _run(self) -> None:
        try:
            where = self._work(self.progress.emit, self.token)
        except ModelError as err:
            self.failed.emit(str(err))
            return
        except Exception as err:  # keep the app alive whatever the download raises
            log.exception("model download failed")
            self.failed.emit(f"The download of {self.label} failed: {err}. Try again later.")
            return
        self.finished.emit(str(where))
