"""An answer cut by the token limit is marked truncated, in the window and the history, and Continue extends it."""

from __future__ import annotations

from PySide6.QtCore import Qt


def test_truncated_answer_is_marked_and_continue_extends_the_same_message(
    tiny_settings, open_window, ui, qtbot
) -> None:
    tiny_settings(max_new_tokens=8)
    window = open_window()
    ui.send(window, "Tell me a long story")
    [user, answer] = ui.stored(window)
    assert answer.status == "truncated" and answer.content
    widget = window.chat_view.messages[-1]
    assert widget.status.text() == "truncated at the token limit"
    assert widget.continue_button.isVisibleTo(window) and not window.chat_view.messages[0].continue_button.isVisibleTo(
        window
    )

    qtbot.mouseClick(widget.continue_button, Qt.MouseButton.LeftButton)
    assert window.chat.busy and not widget.continue_button.isVisibleTo(window)
    assert ui.stored(window)[-1].status == "generating"  # a crash now is recovered as interrupted
    ui.wait_idle(window)
    stored = ui.stored(window)
    assert [m.id for m in stored] == [user.id, answer.id]  # the same message grew; no new turn
    assert stored[-1].content.startswith(answer.content) and len(stored[-1].content) > len(answer.content)
    assert stored[-1].status == "truncated" and stored[-1].stats["new_tokens"] == 8
    assert widget.text == stored[-1].content and widget.continue_button.isVisibleTo(window)


def test_continue_is_offered_on_the_last_cut_off_answer_only(open_window) -> None:
    window = open_window(wait_for_model=False)
    conv = window.store.create_conversation("saved earlier")
    for role, text, status in [
        ("user", "a", "complete"),
        ("assistant", "cut", "truncated"),
        ("user", "b", "complete"),
        ("assistant", "done.", "complete"),
    ]:
        window.store.add_message(conv.id, role, text, status=status)
    window.chat.open(conv.id)
    assert [w.continue_button.isVisibleTo(w) for w in window.chat_view.messages] == [False] * 4
    window.chat.continue_answer()  # nothing to continue: the last answer is complete
    assert not window.chat.busy
    window.store.add_message(conv.id, "user", "c")
    window.store.add_message(conv.id, "assistant", "stopped half", status="stopped")
    window.chat.open(conv.id)
    assert [w.continue_button.isVisibleTo(w) for w in window.chat_view.messages] == [False] * 5 + [True]
    assert window.chat_view.messages[1].status.text() == "truncated at the token limit"
