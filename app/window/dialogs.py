"""The Help (keyboard shortcuts) and About dialogs."""

from __future__ import annotations

import platform
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from app.window.shortcuts import SHORTCUTS
from core.engine.ready import ModelInfo


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


class HelpDialog(QDialog):
    """Lists every keyboard shortcut, the table as large as its text (no scroll bars, nothing cut short)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.table = table = QTableWidget(len(SHORTCUTS), 2)
        table.setHorizontalHeaderLabels(["Keys", "Action"])
        table.verticalHeader().hide()
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        table.setSizeAdjustPolicy(QTableWidget.SizeAdjustPolicy.AdjustToContents)
        for row, shortcut in enumerate(SHORTCUTS):
            keys = QKeySequence(shortcut.keys).toString(QKeySequence.SequenceFormat.NativeText)
            table.setItem(row, 0, QTableWidgetItem(keys))
            table.setItem(row, 1, QTableWidgetItem(shortcut.description))
        table.resizeColumnsToContents()
        table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("In the message box, Enter sends and Shift+Enter starts a new line."))
        layout.addWidget(table)
        layout.addWidget(buttons)


class AboutDialog(QDialog):
    """Versions of the app and its main libraries, and the device in use."""

    def __init__(self, model: ModelInfo | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About Lookahead Chat")
        device = f"{model.device_label} ({model.precision})" if model else "no model loaded"
        model_line = (
            f"{model.name}, {model.parameters / 1e6:.0f}M parameters, context {model.context_length}"
            if model
            else "none"
        )
        rows = [
            ("Lookahead Chat", _version("lookahead-chat")),
            ("Model", model_line),
            ("Device", device),
            ("Python", platform.python_version()),
            ("Qt / PySide6", f"{qVersion()} / {pyside_version}"),
            ("PyTorch", _version("torch")),
            ("transformers", _version("transformers")),
        ]
        text = "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in rows)
        self.label = QLabel(
            "<p>Offline chat with local language models, made fast by lookahead decoding "
            "(Fu et al., ICML 2024).</p>"
            f"<table>{text}</table>"
        )
        self.label.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addWidget(buttons)
