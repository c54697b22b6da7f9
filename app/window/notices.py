"""In-window messages: a dismissable notice (errors, warnings) and the model-load panel."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QToolButton, QWidget


class NoticeBar(QFrame):
    """Messages at the top of the chat with a close button; ``level`` is info, warning or error.

    A lasting message (the history was set aside, the settings were reset) stays until the user
    dismisses it; a passing one (an answer's error) is also cleared when the next answer starts.
    """

    LEVELS = ("info", "warning", "error")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notice")
        self.label = QLabel(wordWrap=True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton(text="✕", toolTip="Dismiss", autoRaise=True)
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button)
        self._lasting: list[tuple[str, str]] = []
        self._passing: tuple[str, str] | None = None
        self.hide()

    @property
    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def show_message(self, text: str, level: str = "warning", lasting: bool = False) -> None:
        if lasting:
            if (text, level) not in self._lasting:
                self._lasting.append((text, level))
        else:
            self._passing = (text, level)
        self._refresh()

    def clear_passing(self) -> None:
        """Drop the passing message; lasting ones stay."""
        self._passing = None
        self._refresh()

    def dismiss(self) -> None:
        self._lasting.clear()
        self._passing = None
        self._refresh()

    def _refresh(self) -> None:
        messages = self._lasting + ([self._passing] if self._passing else [])
        if not messages:
            self.hide()
            return
        self.label.setText("\n\n".join(text for text, _ in messages))
        self.setProperty("level", max((level for _, level in messages), key=self.LEVELS.index))
        self.style().polish(self)
        self.show()


class LoadPanel(QFrame):
    """Model loading (or first-run download) progress with Cancel; on failure, the reason and Retry."""

    cancel_requested = Signal()
    retry_requested = Signal()
    settings_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("loadPanel")
        self.label = QLabel(wordWrap=True)
        self.progress = QProgressBar(minimum=0, maximum=1000, textVisible=True)
        self.cancel = QPushButton("Cancel")
        self.retry = QPushButton("Retry")
        self.open_settings = QPushButton("Settings…")
        self.cancel.clicked.connect(self.cancel_requested)
        self.retry.clicked.connect(self.retry_requested)
        self.open_settings.clicked.connect(self.settings_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.label, 2)
        layout.addWidget(self.progress, 1)
        for button in (self.cancel, self.retry, self.open_settings):
            layout.addWidget(button)
        self.hide()

    def show_progress(self, stage: str, fraction: float) -> None:
        self.label.setText(stage)
        self.progress.setValue(int(fraction * 1000))
        self.progress.setFormat(f"{fraction * 100:.0f}%")
        self.progress.show()
        self.cancel.show()
        self.retry.hide()
        self.open_settings.hide()
        self.show()

    def show_failure(self, message: str) -> None:
        self.label.setText(message)
        self.progress.hide()
        self.cancel.hide()
        self.retry.show()
        self.open_settings.show()
        self.show()
