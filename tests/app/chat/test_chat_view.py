"""The chat view's parts: Markdown with highlighted, copyable code; streamed rendering; the composer's keys."""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QGuiApplication

from app.chat.composer import Composer
from app.chat.view import ChatView


def test_markdown_code_blocks_are_highlighted_and_copyable(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message("assistant", "Here:\n\n```python\ndef f(x):\n    return x + 1\n```\n")
    assert widget.code_blocks == ["def f(x):\n    return x + 1"]
    html = widget.segments[0].toHtml()
    assert "Copy" in html and "color:" in html
    widget.segments[0].anchorClicked.emit(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text() == "def f(x):\n    return x + 1"
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text().startswith("Here:")


def test_streamed_text_is_rendered_within_a_tenth_of_a_second(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message("assistant", "", "generating")
    widget.append("**bold** and ```")
    widget.append("python\nx = 1")
    qtbot.waitUntil(lambda: "x = 1" in widget.shown_text, timeout=1000)
    assert widget.status.text() == "generating…"


def test_streaming_renders_finished_blocks_once_and_only_the_tail_again(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    widget = view.add_message("assistant", "", "generating")
    widget.append("First paragraph.\n\n```python\nx = 1\n\ny = 2\n")
    qtbot.waitUntil(lambda: "y = 2" in widget.shown_text, timeout=1000)
    first = widget.segments[0]
    assert first.toPlainText().strip() == "First paragraph."  # the blank line inside the fence is no split
    widget.append("```\n\nDone.")
    qtbot.waitUntil(lambda: "Done." in widget.shown_text, timeout=1000)
    assert widget.segments[0] is first and first.toPlainText().strip() == "First paragraph."
    assert widget.code_blocks == ["x = 1\n\ny = 2"]
    widget.finish(widget.text)
    assert "Done." in widget.segments[-1].toPlainText()
    widget.render()  # a full render collapses the segments
    assert len(widget.segments) == 1 and "Done." in widget.shown_text


def test_stable_prefix_ends_at_a_blank_line_outside_code() -> None:
    from app.chat.message_widget import stable_prefix_length

    assert stable_prefix_length("a\n\nb") == 3
    assert stable_prefix_length("a\n\n```\nx\n\ny") == 3
    assert stable_prefix_length("a\n\n```\nx\n\n```\n\nz") == len("a\n\n```\nx\n\n```\n\n")
    assert stable_prefix_length("no blank line yet") == 0


def test_enter_sends_and_shift_enter_adds_a_line(qtbot) -> None:
    composer = Composer()
    qtbot.addWidget(composer)
    sent: list[str] = []
    composer.send_requested.connect(sent.append)
    qtbot.keyClicks(composer.box, "line one")
    qtbot.keyClick(composer.box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(composer.box, "line two")
    assert sent == []
    qtbot.keyClick(composer.box, Qt.Key.Key_Return)
    assert sent == ["line one\nline two"]
    composer.set_busy(True)
    qtbot.keyClick(composer.box, Qt.Key.Key_Return)
    assert len(sent) == 1 and composer.button.text() == "Stop"
