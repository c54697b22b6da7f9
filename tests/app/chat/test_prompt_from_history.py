"""The model's prompt is the conversation as stored (its active branch), not what the message widgets hold."""

from __future__ import annotations


def test_the_prompt_follows_the_stored_branch_on_show(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=6, system_prompt="")
    window = open_window()
    store = window.store
    conversation = store.create_conversation("Branched")
    old_question = store.add_message(conversation.id, "user", "Old question", parent_id=None)
    store.add_message(conversation.id, "assistant", "Old answer", parent_id=old_question.id)
    new_question = store.add_message(conversation.id, "user", "New question", parent_id=None)  # an edit
    store.add_message(conversation.id, "assistant", "New answer", parent_id=new_question.id)
    window.refresh_conversations()
    window.chat.open(conversation.id)
    prompts: list[list[tuple[str, str]]] = []
    generate = window.worker.generate

    def spy(request):  # the real worker still answers
        prompts.append([(m.role, m.content) for m in request.messages])
        return generate(request)

    window.worker.generate = spy

    window.chat_view.messages[1].set_text("Text only the widget has")  # the view is not where the prompt comes from
    ui.send(window, "Follow-up")
    assert prompts[-1] == [("user", "New question"), ("assistant", "New answer"), ("user", "Follow-up")]

    window.chat_view.messages[0].previous_button.click()  # the old branch, with its own continuation
    assert [w.text for w in window.chat_view.messages] == ["Old question", "Old answer"]
    window.chat.regenerate()
    ui.wait_idle(window)
    assert prompts[-1] == [("user", "Old question")]
