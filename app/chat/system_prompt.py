"""The chat's system prompt: a one-line bar above the messages and the dialog that edits it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.elided_label import ElidedLabel

PREVIEW_LENGTH = 90


class SystemPromptBar(QWidget):
    """'System prompt: ...' for the chat on show, with a button that asks to edit it."""

    edit_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = ElidedLabel()
        self.label.setObjectName("status")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.edit_button = QToolButton(
            objectName="messageAction",
            text="Edit",
            toolTip="This chat's system prompt (new chats start from the default in Settings)",
        )
        self.edit_button.clicked.connect(self.edit_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(16, 4, 16, 0)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.edit_button)

    def show_prompt(self, text: str, own: bool) -> None:
        """Show ``text`` (the chat's own prompt, or the default from Settings when ``own`` is False)."""
        line = " ".join(text.split())
        if len(line) > PREVIEW_LENGTH:
            line = line[: PREVIEW_LENGTH - 1].rstrip() + "…"
        source = "" if own else " (the default from Settings)"
        self.label.setText(f"System prompt{source}: {line}" if line else f"No system prompt{source}")
        self.label.setToolTip(text)


class SystemPromptDialog(QDialog):
    """Edits one chat's system prompt, or sets it to follow the default from Settings."""

    def __init__(self, own: str | None, default: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("System prompt of this chat")
        self.setMinimumWidth(520)
        self.default = default
        self.text = QPlainTextEdit(default if own is None else own)
        self.text.setPlaceholderText("No system prompt: the model gets only the conversation")
        self.follow = QCheckBox("Use the default system prompt from Settings")
        self.follow.setChecked(own is None)
        self.follow.toggled.connect(self._follow_toggled)
        self._follow_toggled(own is None)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Used for every answer in this chat, before the conversation.", wordWrap=True))
        layout.addWidget(self.text)
        layout.addWidget(self.follow)
        layout.addWidget(buttons)

    def result_prompt(self) -> str | None:
        """The chat's own system prompt ("" for none), or None to follow the default."""
        return None if self.follow.isChecked() else self.text.toPlainText().strip()

    def _follow_toggled(self, follow: bool) -> None:
        if follow:
            self.text.setPlainText(self.default)
        self.text.setReadOnly(follow)
        self.text.setEnabled(not follow)
