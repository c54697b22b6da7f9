"""One chat message: speaker, Markdown body (re-rendered as it streams), actions and figures."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout, QWidget

from app.markdown import COPY_SCHEME, MarkdownRenderer

RENDER_DELAY_MS = 100  # streamed text is re-rendered at most 10 times a second
STATUS_TEXT = {"generating": "generating…", "stopped": "stopped", "interrupted": "interrupted", "complete": ""}


class MessageText(QTextBrowser):
    """A read-only rich-text view as tall as its content (the chat view scrolls, not each message)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("background: transparent;")
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)

    def _fit(self) -> None:
        self.setFixedHeight(int(self.document().size().height()) + 4)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(400, int(self.document().size().height()) + 4)


class MessageWidget(QFrame):
    """Shows one message; ``append`` adds streamed text and re-renders on a short timer."""

    edit_requested = Signal()
    regenerate_requested = Signal()

    def __init__(self, role: str, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.renderer = renderer
        self._text = ""
        self._code_blocks: list[str] = []
        self.setObjectName("message")
        self.setProperty("role", role)

        self.speaker = QLabel("You" if role == "user" else "Assistant", objectName="speaker")
        self.status = QLabel("", objectName="status")
        self.copy_button = self._action("Copy", "Copy this message as Markdown", self.copy_text)
        self.edit_button = self._action("Edit", "Edit this message and send it again (Ctrl+E)", self.edit_requested.emit)
        self.regenerate_button = self._action("Regenerate", "Generate this answer again (Ctrl+R)", self.regenerate_requested.emit)
        self.edit_button.setVisible(False)
        self.regenerate_button.setVisible(False)
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.speaker)
        header.addWidget(self.status)
        header.addStretch(1)
        for button in (self.edit_button, self.regenerate_button, self.copy_button):
            header.addWidget(button)

        self.note = QLabel("", objectName="status", wordWrap=True)
        self.note.setProperty("state", "interrupted")
        self.note.setVisible(False)
        self.body = MessageText(self)
        self.body.anchorClicked.connect(self._link_clicked)
        self.figures = QLabel("", objectName="figures")
        self.figures.setVisible(False)
        self.figures.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.note)
        layout.addWidget(self.body)
        layout.addWidget(self.figures)

        self._render_timer = QTimer(self, singleShot=True, interval=RENDER_DELAY_MS)
        self._render_timer.timeout.connect(self.render)

    @property
    def text(self) -> str:
        return self._text

    @property
    def code_blocks(self) -> list[str]:
        return list(self._code_blocks)

    def set_text(self, text: str) -> None:
        """Replace the text and render now."""
        self._text = text
        self.render()

    def append(self, text: str) -> None:
        """Add streamed text; the view catches up within :data:`RENDER_DELAY_MS`."""
        self._text += text
        if not self._render_timer.isActive():
            self._render_timer.start()

    def render(self) -> None:
        self._render_timer.stop()
        rendered = self.renderer.render(self._text)
        self._code_blocks = rendered.code_blocks
        self.body.setHtml(rendered.html)

    def set_status(self, status: str) -> None:
        self.status.setText(STATUS_TEXT.get(status, status))
        self.status.setProperty("state", status)
        self.status.style().polish(self.status)

    def set_note(self, note: str) -> None:
        """A remark above the text (e.g. turns left out of the context, or an error)."""
        self.note.setText(note)
        self.note.setVisible(bool(note))

    def set_figures(self, summary: str) -> None:
        self.figures.setText(summary)
        self.figures.setVisible(bool(summary))

    def copy_text(self) -> None:
        QGuiApplication.clipboard().setText(self._text)

    def _link_clicked(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            index = int(url.path() or 0)
            if 0 <= index < len(self._code_blocks):
                QGuiApplication.clipboard().setText(self._code_blocks[index])
        else:
            QDesktopServices.openUrl(url)

    def _action(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self, objectName="messageAction", text=text, toolTip=tip)
        button.clicked.connect(slot)
        return button
