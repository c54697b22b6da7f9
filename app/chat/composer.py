"""The message box (Enter sends, Shift+Enter starts a new line) and the Send/Stop button."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QWidget


class MessageBox(QPlainTextEdit):
    """Plain-text input that emits ``submitted`` on Enter (Shift+Enter inserts a line break)."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if (
            event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier
        ):
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class Composer(QWidget):
    """Input box and the Send/Stop button."""

    send_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.box = MessageBox(objectName="composer")
        self.box.setPlaceholderText("Type a message; Enter sends, Shift+Enter starts a new line")
        self.box.setFixedHeight(84)
        self.box.submitted.connect(self.submit)
        self.button = QPushButton("Send", objectName="sendButton")
        self.button.setMinimumWidth(88)
        self.button.clicked.connect(self._clicked)
        row = QHBoxLayout(self)
        row.setContentsMargins(16, 4, 16, 12)
        row.addWidget(self.box, 1)
        row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        self._busy = False

    def set_busy(self, busy: bool) -> None:
        """Send becomes Stop while an answer is being generated."""
        self._busy = busy
        self.button.setText("Stop" if busy else "Send")
        self.button.setToolTip("Stop the answer (Esc)" if busy else "Send the message (Enter)")
        self.button.setProperty("stop", busy)
        self.button.style().polish(self.button)

    def submit(self) -> None:
        """Send the text (ignored while busy or empty)."""
        text = self.box.toPlainText().strip()
        if self._busy or not text:
            return
        self.send_requested.emit(text)

    def _clicked(self) -> None:
        if self._busy:
            self.stop_requested.emit()
        else:
            self.submit()
