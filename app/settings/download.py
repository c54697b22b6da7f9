"""A hub model download on its own thread (it never touches the loaded model), with progress and cancel."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from core.models.errors import ModelError
from core.models.hub import download_hub_model
from core.progress import CancelToken

log = logging.getLogger(__name__)


class HubDownload(QObject):
    """Downloads ``repo_id`` into the model cache; signals arrive on the GUI thread."""

    progress = Signal(str, float)
    finished = Signal(str)  # the model folder
    failed = Signal(str)

    def __init__(self, repo_id: str, models_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.repo_id = repo_id
        self.models_dir = models_dir
        self.token = CancelToken()
        self._thread = threading.Thread(target=self._run, name="hub-download", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self.token.cancel()

    def _run(self) -> None:
        try:
            folder = download_hub_model(self.repo_id, self.models_dir, self.progress.emit, self.token)
        except ModelError as err:
            self.failed.emit(str(err))
            return
        except Exception as err:  # keep the app alive whatever the hub client raises
            log.exception("hub download failed")
            self.failed.emit(f"The download of {self.repo_id} failed: {err}. Try again later.")
            return
        self.finished.emit(str(folder))
