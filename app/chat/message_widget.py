"""One chat message: speaker, Markdown body (rendered incrementally as it streams), actions, branch arrows,
figures, and the in-place editor of a user message."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.composer import MessageBox
from app.chat.markdown import COPY_SCHEME, MarkdownRenderer

RENDER_DELAY_MS = 100  # streamed text is re-rendered at most 10 times a second
STATUS_TEXT = {
    "waiting": "waiting for the model…",  # shown only: stored as generating
    "generating": "generating…",
    "stopped": "stopped",
    "interrupted": "interrupted",
    "truncated": "truncated at the token limit",
    "complete": "",
}
CONTINUABLE = ("truncated", "stopped", "interrupted")  # answers cut off before their end


def stable_prefix_length(text: str) -> int:
    """Length of the leading complete Markdown blocks: up to the last blank line outside a code fence."""
    position = stable = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        position += len(line)
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and not stripped and line.endswith("\n"):
            stable = position
    return stable


class MessageText(QTextBrowser):
    """A read-only rich-text view as tall as its content, with copy links for its code blocks."""

    def __init__(self, renderer: MarkdownRenderer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.renderer = renderer
        self.code_blocks: list[str] = []
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("background: transparent;")
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.anchorClicked.connect(self._link_clicked)

    def show_markdown(self, text: str) -> None:
        rendered = self.renderer.render(text)
        self.code_blocks = rendered.code_blocks
        self.setHtml(rendered.html)

    def _link_clicked(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            index = int(url.path() or 0)
            if 0 <= index < len(self.code_blocks):
                QGuiApplication.clipboard().setText(self.code_blocks[index])
        else:
            QDesktopServices.openUrl(url)

    def _fit(self) -> None:
        self.setFixedHeight(int(self.document().size().height()) + 4)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(400, int(self.document().size().height()) + 4)


class MessageEditor(QWidget):
    """A user message's text in an edit box, with Save (Enter) and Cancel (Esc)."""

    saved = Signal(str)
    cancelled = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.box = MessageBox(objectName="composer")
        self.box.setFixedHeight(84)
        self.box.submitted.connect(self.save)
        self.save_button = QPushButton("Save and regenerate")
        self.save_button.setToolTip("Send the edited message as a new branch; the old one stays reachable (Enter)")
        self.save_button.clicked.connect(self.save)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Keep the message as it was (Esc)")
        self.cancel_button.clicked.connect(self.cancelled)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box)
        layout.addLayout(buttons)

    def save(self) -> None:
        text = self.box.toPlainText().strip()
        if text:
            self.saved.emit(text)


class MessageWidget(QFrame):
    """Shows one message; ``append`` adds streamed text and re-renders on a short timer.

    A message with alternatives (an edited question, a regenerated answer) shows ``< 1/2 >`` arrows.
    """

    edit_submitted = Signal(str)
    regenerate_requested = Signal()
    continue_requested = Signal()
    branch_requested = Signal(int)  # -1: the previous alternative, +1: the next

    def __init__(
        self, role: str, renderer: MarkdownRenderer, message_id: int | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.role = role
        self.message_id = message_id  # the stored message shown (None: not stored)
        self.renderer = renderer
        self._text = ""
        self.state = "complete"
        self.setObjectName("message")
        self.setProperty("role", role)

        self.speaker = QLabel("You" if role == "user" else "Assistant", objectName="speaker")
        self.status = QLabel("", objectName="status")
        self.copy_button = self._action("Copy", "Copy this message as Markdown", self.copy_text)
        self.edit_button = self._action(
            "Edit", "Edit this message and send it again as a new branch (Ctrl+E: the last one)", self.begin_edit
        )
        self.regenerate_button = self._action(
            "Regenerate", "Generate this answer again (Ctrl+R)", self.regenerate_requested.emit
        )
        self.continue_button = self._action(
            "Continue", "Generate more of this answer, from where it was cut off", self.continue_requested.emit
        )
        for button in (self.edit_button, self.regenerate_button, self.continue_button):
            button.setVisible(False)
        self.previous_button = self._action(
            "‹", "The previous version of this message", lambda: self.branch_requested.emit(-1)
        )
        self.branch_label = QLabel("", objectName="status")
        self.next_button = self._action("›", "The next version of this message", lambda: self.branch_requested.emit(1))
        self.branch_arrows = (self.previous_button, self.branch_label, self.next_button)
        self._branch, self._branch_locked = (0, 1), False
        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.speaker)
        header.addWidget(self.status)
        header.addStretch(1)
        for part in self.branch_arrows:
            header.addWidget(part)
        for button in (self.edit_button, self.continue_button, self.regenerate_button, self.copy_button):
            header.addWidget(button)

        self.note = QLabel("", objectName="status", wordWrap=True)
        self.note.setProperty("state", "interrupted")
        self.note.setVisible(False)
        self.segments = [MessageText(renderer, self)]
        self._stable_length = 0  # characters shown in finished segments (all but the last)
        self.figures = QLabel("", objectName="figures")
        self.figures.setVisible(False)
        self.figures.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.note)
        layout.addWidget(self.segments[0])
        layout.addWidget(self.figures)
        self._layout = layout
        self.editor: MessageEditor | None = None
        self._show_branch()

        self._render_timer = QTimer(self, singleShot=True, interval=RENDER_DELAY_MS)
        self._render_timer.timeout.connect(self._render_stream)

    @property
    def text(self) -> str:
        return self._text

    @property
    def code_blocks(self) -> list[str]:
        return [code for segment in self.segments for code in segment.code_blocks]

    @property
    def shown_text(self) -> str:
        """The rendered text as plain text (all segments)."""
        return "\n".join(segment.toPlainText() for segment in self.segments)

    def set_text(self, text: str) -> None:
        """Replace the text and render it now as one segment."""
        self._text = text
        self.render()

    def append(self, text: str) -> None:
        """Add streamed text; the view catches up within :data:`RENDER_DELAY_MS`."""
        self._text += text
        if not self._render_timer.isActive():
            self._render_timer.start()

    def finish(self, text: str) -> None:
        """The answer ended with ``text``: render what is pending (all of it if the text changed)."""
        if text == self._text:
            self._render_stream()
        else:
            self.set_text(text)

    def render(self) -> None:
        """Render the whole text into one segment (loading, theme change, text replaced)."""
        self._render_timer.stop()
        for segment in self.segments[1:]:
            self._layout.removeWidget(segment)
            segment.hide()
            segment.deleteLater()
        del self.segments[1:]
        self.segments[0].renderer = self.renderer
        self.segments[0].show_markdown(self._text)
        self._stable_length = 0

    def _render_stream(self) -> None:
        """Streaming: finished Markdown blocks move into a segment that is never re-rendered;
        only the open tail is, so the cost per update stays small however long the answer grows."""
        self._render_timer.stop()
        stable = stable_prefix_length(self._text)
        if stable > self._stable_length:
            self.segments[-1].show_markdown(self._text[self._stable_length : stable])
            self._stable_length = stable
            tail = MessageText(self.renderer, self)
            self._layout.insertWidget(self._layout.indexOf(self.segments[-1]) + 1, tail)
            self.segments.append(tail)
        self.segments[-1].show_markdown(self._text[self._stable_length :])

    @property
    def continuable(self) -> bool:
        """An answer that was cut off (token limit, Stop, an error) and can be extended."""
        return self.role == "assistant" and self.state in CONTINUABLE

    def set_status(self, status: str) -> None:
        self.state = status
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

    def set_branch(self, index: int, count: int) -> None:
        """Show ``< index+1/count >`` when the message has alternatives."""
        self._branch = (index, count)
        self._show_branch()

    def lock_branch(self, locked: bool) -> None:
        """Disable the arrows (while an answer is being generated)."""
        self._branch_locked = locked
        self._show_branch()

    def _show_branch(self) -> None:
        index, count = self._branch
        for part in self.branch_arrows:
            part.setVisible(count > 1)
        self.branch_label.setText(f"{index + 1}/{count}")
        self.previous_button.setEnabled(not self._branch_locked and index > 0)
        self.next_button.setEnabled(not self._branch_locked and index < count - 1)

    @property
    def editing(self) -> bool:
        return self.editor is not None

    def begin_edit(self) -> None:
        """Replace the text by an edit box holding it; Save emits :attr:`edit_submitted`."""
        if self.editor is None:
            self.editor = MessageEditor(self)
            self.editor.box.setPlainText(self._text)
            self.editor.saved.connect(self.edit_submitted)
            self.editor.cancelled.connect(self.cancel_edit)
            self._layout.insertWidget(self._layout.indexOf(self.segments[0]), self.editor)
            for segment in self.segments:
                segment.hide()
        self.editor.box.setFocus()
        self.editor.box.moveCursor(self.editor.box.textCursor().MoveOperation.End)

    def cancel_edit(self) -> None:
        """Close the edit box; the message is shown as it was."""
        if self.editor is None:
            return
        self._layout.removeWidget(self.editor)
        self.editor.hide()
        self.editor.deleteLater()
        self.editor = None
        for segment in self.segments:
            segment.show()

    def copy_text(self) -> None:
        QGuiApplication.clipboard().setText(self._text)

    def _action(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self, objectName="messageAction", text=text, toolTip=tip)
        button.clicked.connect(slot)
        return button
