"""An answer costs no needless database round-trips: the conversation is not re-read, the mode not written apart."""

from __future__ import annotations


def test_an_answer_neither_rereads_the_conversation_nor_writes_twice(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=6)
    window = open_window()
    ui.send(window, "First question")
    ui.send(window, "Second question")
    window.chat._autosave.setInterval(3_600_000)  # no progress save during this short answer
    statements: list[str] = []
    window.store.connection.set_trace_callback(statements.append)
    try:
        ui.send(window, "Third question")
    finally:
        window.store.connection.set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM MESSAGES" in s.upper()]
    updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE MESSAGES")]
    assert reads == []
    assert len(updates) == 1  # the final save: text, status, mode and figures at once
    stored = ui.stored(window)
    assert [m.role for m in stored] == ["user", "assistant"] * 3
    assert stored[-1].mode and stored[-1].status == "truncated"
    assert stored[-1].content == window.chat_view.messages[-1].text


def test_the_prompt_holds_the_conversation_shown(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=6, system_prompt="")
    window = open_window()
    ui.send(window, "First question")
    prompts: list[tuple] = []
    generate = window.worker.generate
    window.worker.generate = lambda request: prompts.append(request.messages) or generate(request)
    ui.send(window, "Second question")
    first_answer = window.chat_view.messages[1].text
    assert [(m.role, m.content) for m in prompts[0]] == [
        ("user", "First question"),
        ("assistant", first_answer),
        ("user", "Second question"),
    ]
