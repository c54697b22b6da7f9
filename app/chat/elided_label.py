"""A one-line label that shortens its text to fit, so a long text never widens the window (the system
prompt bar, the window's status bar)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QWidget

ELIDED_MIN_CHARS = 10  # the narrowest a shortened text gets, in average characters


class ElidedLabel(QLabel):
    """A one-line label that shows as much of its text as fits, ending in "…"; the tooltip has all of it.

    Its size hint is the whole text, its minimum a few characters: a layout gives it room when
    there is some and takes it back when the window narrows.
    """

    def __init__(self, text: str = "", tip: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tip = tip
        self.setText(text)

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip("\n\n".join(part for part in (text, self._tip) if part))

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        margins = hint.width() - self.fontMetrics().horizontalAdvance(self.text())
        shortest = self.fontMetrics().averageCharWidth() * ELIDED_MIN_CHARS + max(margins, 0)
        return QSize(min(hint.width(), shortest), hint.height())

    def shown_text(self) -> str:
        """The text as it fits the label's width now."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        self.style().drawItemText(
            painter,
            self.contentsRect(),
            int(self.alignment()),
            self.palette(),
            self.isEnabled(),
            self.shown_text(),
            self.foregroundRole(),
        )
