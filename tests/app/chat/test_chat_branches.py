"""Edits and regenerations as branches and the per-chat system prompt, in the real window with the tiny model."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt

from core.settings import SamplingSettings


def record_requests(window) -> list:
    """The answer requests the window hands to its real worker, in order (a spy: the worker still runs them)."""
    requests = []
    generate = window.worker.generate

    def spy(request):
        requests.append(request)
        return generate(request)

    window.worker.generate = spy
    return requests


def prompt_texts(request) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages]


def arrows(window) -> list[str | None]:
    """Each message's "i/n" when it shows branch arrows, else None."""
    return [w.branch_label.text() if w.branch_label.isVisibleTo(w) else None for w in window.chat_view.messages]


def save_edit(window, index: int, text: str) -> None:
    widget = window.chat_view.messages[index]
    widget.edit_button.click()
    assert widget.editing and widget.editor.box.toPlainText() == widget.text
    widget.editor.box.setPlainText(text)
    widget.editor.save_button.click()


def reopen(window, open_window, ui) -> object:
    conversation = window.chat.current_id
    window.close()
    again = open_window()
    again.chat.open(conversation)
    return again


def test_editing_an_earlier_message_branches_and_both_branches_survive_a_restart(
    tiny_settings, open_window, ui
) -> None:
    tiny_settings(system_prompt="")
    window = open_window()
    requests = record_requests(window)
    ui.send(window, "First question")
    ui.send(window, "Second question")
    old = [(m.role, m.content) for m in ui.stored(window)]
    assert all(w.edit_button.isVisibleTo(window) for w in window.chat_view.messages if w.role == "user")

    save_edit(window, 0, "First question, edited")
    assert window.chat.busy
    ui.wait_idle(window)
    new = [(m.role, m.content) for m in ui.stored(window)]
    assert [w.text for w in window.chat_view.messages] == [text for _, text in new]
    assert new[0] == ("user", "First question, edited") and len(new) == 2
    assert prompt_texts(requests[-1]) == [("user", "First question, edited")]  # nothing of the other branch
    assert arrows(window) == ["2/2", None]
    first = window.chat_view.messages[0]
    assert not first.next_button.isEnabled() and first.previous_button.isEnabled()

    first.previous_button.click()  # the whole old continuation comes back
    assert [(w.role, w.text) for w in window.chat_view.messages] == old
    assert window.chat_view.messages[0].branch_label.text() == "1/2"
    window.chat.regenerate()  # Ctrl+R: the old branch's last answer gets a sibling; the prompt is that branch only
    ui.wait_idle(window)
    assert prompt_texts(requests[-1]) == old[:3]
    assert window.chat_view.messages[-1].branch_label.text() == "2/2"

    again = reopen(window, open_window, ui)
    assert [(w.role, w.text) for w in again.chat_view.messages][:3] == old[:3]
    assert arrows(again) == ["1/2", None, None, "2/2"]
    again.chat_view.messages[-1].previous_button.click()
    assert [(w.role, w.text) for w in again.chat_view.messages] == old
    again.chat_view.messages[0].next_button.click()
    assert [(m.role, m.content) for m in ui.stored(again)] == new
    assert [w.text for w in again.chat_view.messages] == [text for _, text in new]


def test_an_edit_while_an_answer_is_generating_is_refused_until_stop(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=600)
    window = open_window()
    long_answers = window.settings.current
    window.settings.update(sampling=SamplingSettings(max_new_tokens=8))
    ui.send(window, "Short one")
    window.settings.set(long_answers)
    widget = window.chat_view.messages[0]
    widget.edit_button.click()
    ui.send(window, "A long story please", wait=False)
    ui.wait_text(window)
    widget.editor.box.setPlainText("Short one, edited")
    widget.editor.save_button.click()
    assert "press Stop" in window.notice.text
    assert widget.editing and len(ui.stored(window)) == 4  # nothing was added, the edit is still there
    window.composer.button.click()  # Stop
    ui.wait_idle(window)
    widget.editor.save_button.click()
    assert window.chat.busy
    window.composer.button.click()
    ui.wait_idle(window)
    assert [m.content for m in ui.stored(window)][0] == "Short one, edited"


def test_ctrl_e_opens_the_last_message_for_editing_and_esc_cancels(tiny_settings, open_window, ui, qtbot) -> None:
    tiny_settings()
    window = open_window()
    ui.send(window, "one")
    ui.send(window, "two")
    window.shortcut_actions["edit_last"].trigger()
    last_user = window.chat_view.messages[2]
    assert last_user.editing and last_user.editor.box.toPlainText() == "two"
    assert not window.chat_view.messages[0].editing
    window.shortcut_actions["stop"].trigger()  # Esc
    assert not last_user.editing and last_user.segments[0].isVisibleTo(window)
    window.shortcut_actions["edit_last"].trigger()
    last_user.editor.box.setPlainText("two, edited")
    qtbot.keyClick(last_user.editor.box, Qt.Key.Key_Return)  # Enter saves, as in the message box
    ui.wait_idle(window)
    assert [m.content for m in ui.stored(window) if m.role == "user"] == ["one", "two, edited"]


def test_each_chat_has_its_own_system_prompt(tiny_settings, open_window, ui, app_paths) -> None:
    from app.chat.system_prompt import SystemPromptDialog

    tiny_settings(system_prompt="Default prompt.")
    window = open_window()
    requests = record_requests(window)
    assert "Default prompt." in window.system_prompt_bar.label.text()
    assert "(the default from Settings)" in window.system_prompt_bar.label.text()
    ui.send(window, "hello")
    assert prompt_texts(requests[-1])[0] == ("system", "Default prompt.")  # a new chat starts from the default
    assert window.system_prompt_bar.label.text() == "System prompt: Default prompt."  # its own copy now
    first = window.chat.current_id

    window.new_chat()
    dialog = SystemPromptDialog(window.chat.own_system_prompt, window.settings.current.system_prompt, window)
    assert dialog.follow.isChecked() and dialog.text.toPlainText() == "Default prompt."
    dialog.follow.setChecked(False)
    dialog.text.setPlainText("  Answer in French.  ")
    window.chat.set_system_prompt(dialog.result_prompt())
    assert window.system_prompt_bar.label.text() == "System prompt: Answer in French."
    ui.send(window, "bonjour")
    assert prompt_texts(requests[-1]) == [("system", "Answer in French."), ("user", "bonjour")]
    second = window.chat.current_id
    window.chat.set_system_prompt("")  # none at all
    ui.send(window, "encore")
    assert prompt_texts(requests[-1])[0] == ("user", "bonjour")

    window.apply_settings(replace(window.settings.current, system_prompt="A new default."))
    window.chat.open(first)  # its own copy of the default it started with
    assert window.chat.system_prompt == "Default prompt."
    window.close()
    again = open_window()
    assert again.store.conversation(second).system_prompt == ""
    again.chat.open(second)
    assert again.system_prompt_bar.label.text() == "No system prompt"
    again.new_chat()
    assert "A new default." in again.system_prompt_bar.label.text()
