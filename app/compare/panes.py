"""One side of the comparison: the mode's name, its live rate, and the streamed answer."""

from __future__ import annotations

from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


class RunPane(QFrame):
    """Header (coloured mark, title, rate) over a read-only text view."""

    def __init__(self, title: str, color: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.title = QLabel(f"<b>{title}</b>")
        mark = QLabel()
        mark.setFixedSize(12, 12)
        mark.setStyleSheet(f"background: {color}; border-radius: 6px;")
        self.rate = QLabel("")
        self.rate.setObjectName("rate")
        self.text = QPlainTextEdit(readOnly=True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setPlaceholderText("The answer streams here.")
        header = QHBoxLayout()
        header.addWidget(mark)
        header.addWidget(self.title)
        header.addStretch(1)
        header.addWidget(self.rate)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 8)
        layout.addLayout(header)
        layout.addWidget(self.text, 1)

    def set_title(self, title: str) -> None:
        self.title.setText(f"<b>{title}</b>")

    def begin(self, note: str) -> None:
        """Clear the pane for a new run."""
        self.text.clear()
        self.rate.setText(note)

    def append(self, text: str) -> None:
        if text:
            cursor = self.text.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text)
            self.text.setTextCursor(cursor)

    def show_rate(self, new_tokens: int, seconds: float, steps: int) -> None:
        rate = new_tokens / seconds if seconds > 0 else 0.0
        per_step = new_tokens / steps if steps else 0.0
        self.rate.setText(f"<b>{rate:.1f} tok/s</b> \u00b7 {new_tokens} tokens \u00b7 {per_step:.2f} tokens/step")
