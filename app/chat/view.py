"""The conversation as a scrolling column of messages; follows the bottom while an answer streams."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QScrollArea, QVBoxLayout, QWidget

from app.chat.markdown import DARK, LIGHT, MarkdownRenderer
from app.chat.message_widget import MessageWidget


class ChatView(QScrollArea):
    """Message widgets top to bottom; Edit sits on every user message, Regenerate on every answer,
    Continue on the last one when it was cut off. Signals carry the message's index in the view; a
    widget added with its stored message's id is found again by :meth:`widget_for`."""

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal(int)
    continue_requested = Signal()
    branch_requested = Signal(int, int)  # index, -1 or +1

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatScroll")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.renderer = MarkdownRenderer(LIGHT)
        self.renderer.warm_up()
        self._messages: list[MessageWidget] = []
        self._busy = False
        self._follow = True
        container = QWidget(objectName="messages")
        self._layout = QVBoxLayout(container)
        self._layout.setContentsMargins(16, 12, 16, 12)
        self._layout.setSpacing(10)
        self.placeholder = QLabel("Start a conversation: type a message below.", alignment=Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setEnabled(False)
        self._layout.addWidget(self.placeholder)
        self._layout.addStretch(1)
        self.setWidget(container)
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._keep_bottom)
        bar.valueChanged.connect(lambda value: setattr(self, "_follow", value >= bar.maximum() - 24))

    @property
    def messages(self) -> list[MessageWidget]:
        return list(self._messages)

    def set_dark(self, dark: bool) -> None:
        """Re-render every message with the light or dark code colours."""
        self.renderer = MarkdownRenderer(DARK if dark else LIGHT)
        for widget in self._messages:
            widget.renderer = self.renderer
            widget.render()

    def clear(self) -> None:
        self._discard(self._messages)
        self._messages.clear()
        self.placeholder.setVisible(True)

    def add_message(
        self, role: str, text: str = "", status: str = "complete", message_id: int | None = None
    ) -> MessageWidget:
        widget = MessageWidget(role, self.renderer, message_id)
        widget.set_text(text)
        widget.set_status(status)
        widget.edit_submitted.connect(lambda text: self.edit_submitted.emit(self._index(widget), text))
        widget.regenerate_requested.connect(lambda: self.regenerate_requested.emit(self._index(widget)))
        widget.continue_requested.connect(self.continue_requested)
        widget.branch_requested.connect(lambda step: self.branch_requested.emit(self._index(widget), step))
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._messages.append(widget)
        self.placeholder.setVisible(False)
        self._follow = True
        self.set_busy(self._busy)
        return widget

    def widget_for(self, message_id: int) -> MessageWidget | None:
        """The widget showing stored message ``message_id`` (None: not on show)."""
        return next((widget for widget in self._messages if widget.message_id == message_id), None)

    def remove_from(self, index: int) -> None:
        """Remove the message at ``index`` and all after it."""
        self._discard(self._messages[index:])
        del self._messages[index:]
        self.placeholder.setVisible(not self._messages)
        self.set_busy(self._busy)

    def set_busy(self, busy: bool) -> None:
        """Hide Edit, Regenerate and Continue, and disable the branch arrows, while an answer is being generated."""
        self._busy = busy
        for i, widget in enumerate(self._messages):
            widget.edit_button.setVisible(not busy and widget.role == "user")
            answer = not busy and widget.role == "assistant"
            widget.regenerate_button.setVisible(answer)
            widget.continue_button.setVisible(answer and i == len(self._messages) - 1 and widget.continuable)
            widget.lock_branch(busy)

    def cancel_edits(self) -> None:
        """Close every open message editor."""
        for widget in self._messages:
            widget.cancel_edit()

    def scroll_to_bottom(self) -> None:
        self._follow = True
        QTimer.singleShot(0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum()))

    def _index(self, widget: MessageWidget) -> int:
        return self._messages.index(widget)

    def _discard(self, widgets: list[MessageWidget]) -> None:
        """Take widgets out of the view now (deleteLater alone waits for the event loop)."""
        for widget in widgets:
            self._layout.removeWidget(widget)
            widget.hide()
            widget.deleteLater()

    def _keep_bottom(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(maximum)
