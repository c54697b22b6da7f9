"""The Model tab's "Remote (OpenAI-compatible)" source: URL, API key, the model from the server's list.

The key typed here goes to the system's credential store (never to settings.json); listing the
models and keeping the key run on a thread of their own (both may wait on the network or the desktop's
key service), their results come back as queued signals.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton

from core.remote import RemoteError, RemoteTarget, base_url, list_models, resolve_key, store_key
from core.settings import RemoteSettings


class _Call(QObject):
    """Runs one function on its own thread; ``done`` or ``failed`` (a one-line message) arrive on the GUI thread."""

    done = Signal(object)
    failed = Signal(str)

    def start(self, work: Callable[[], Any]) -> None:
        threading.Thread(target=self._run, args=(work,), name="remote-settings", daemon=True).start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self.done.emit(work())
        except RemoteError as err:
            self.failed.emit(str(err))
        except Exception as err:  # whatever a keyring backend raises: said in one line, never a crash
            self.failed.emit(f"That failed unexpectedly ({type(err).__name__}: {err}). Check the URL and try again.")


def keep_key(url: str, key: str, parent: QObject, failed: Callable[[str], None]) -> None:
    """Put ``key`` in the credential store off the GUI thread; ``failed`` hears why it could not."""
    call = _Call(parent)
    call.failed.connect(failed)
    call.start(lambda: store_key(url, key))


class RemotePanel(QGroupBox):
    """Edits :class:`RemoteSettings`; :meth:`result` validates them, :attr:`typed_key` is the key to keep."""

    def __init__(self, remote: RemoteSettings) -> None:
        super().__init__("Remote (OpenAI-compatible)")
        self.enabled = QCheckBox("Answer with a remote server (vLLM, llama.cpp, Ollama, another Lookahead Chat)")
        self.enabled.setChecked(remote.enabled)
        self.url = QLineEdit(remote.url, placeholderText="http://gpu-box:8000/v1")
        self.key = QLineEdit(placeholderText="API key (kept in the system's credential store)")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_env = QLineEdit(remote.key_env, placeholderText="or an environment variable holding it")
        self.model = QComboBox(editable=True)
        if remote.model:
            self.model.addItem(remote.model)
        self.list_button = QPushButton("List models")
        self.list_button.clicked.connect(self.list_models)
        self.status = QLabel(wordWrap=True)
        self._call: _Call | None = None
        model_row = QHBoxLayout()
        model_row.addWidget(self.model, 1)
        model_row.addWidget(self.list_button)
        form = QFormLayout(self)
        form.addRow(self.enabled)
        form.addRow("Server URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("Key from variable", self.key_env)
        form.addRow("Model", model_row)
        form.addRow("", self.status)

    @property
    def typed_key(self) -> str:
        return self.key.text().strip()

    def result(self) -> RemoteSettings:
        """The edited remote settings; ValueError with a message when they do not hold together."""
        return RemoteSettings(
            self.enabled.isChecked(),
            self.url.text().strip(),
            self.model.currentText().strip(),
            self.key_env.text().strip(),
        )

    def list_models(self) -> None:
        """Keep a typed key, then fill the model list from the server's ``/v1/models``."""
        try:
            url = base_url(self.url.text())
            settings = RemoteSettings(url=url, key_env=self.key_env.text().strip())
        except (RemoteError, ValueError) as err:
            self._show(str(err), error=True)
            return
        typed, key_env = self.typed_key, settings.key_env

        def work() -> list[str]:
            if typed:
                store_key(url, typed)
            key = typed or resolve_key(url, key_env)
            return asyncio.run(list_models(RemoteTarget(url, key)))

        self._show(f"Asking {url} for its models…")
        self.list_button.setEnabled(False)
        self._call = _Call(self)
        self._call.done.connect(self._listed)
        self._call.failed.connect(self._failed)
        self._call.start(work)

    def _listed(self, models: list[str]) -> None:
        self.list_button.setEnabled(True)
        chosen = self.model.currentText()
        self.model.clear()
        self.model.addItems(models)
        if chosen in models:
            self.model.setCurrentText(chosen)
        count = len(models)
        self._show(
            f"{count} model{'s' if count != 1 else ''} on the server." if count else "The server lists no models."
        )

    def _failed(self, message: str) -> None:
        self.list_button.setEnabled(True)
        self._show(message, error=True)

    def _show(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #dc2626;" if error else "")
