"""The shown branch: the stored active path of a branched conversation, kept current without re-reading it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.chat.shown_branch import ShownBranch
from core.chat.history import HistoryError, HistoryStore


@pytest.fixture
def store(tmp_path: Path):
    store = HistoryStore(tmp_path / "history.sqlite3")
    yield store
    store.close()


def texts(messages) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]


def test_the_prompt_is_the_active_branch_up_to_the_message_being_generated(store: HistoryStore) -> None:
    conversation = store.create_conversation("Branched")
    branch = ShownBranch(store)
    branch.show(conversation.id)
    question = branch.add("user", "First question", parent_id=None)
    answer = branch.add("assistant", "First answer", parent_id=question.id)
    follow_up = branch.add("user", "Second question", parent_id=answer.id)
    pending = branch.add("assistant", "", parent_id=follow_up.id, status="generating")
    assert texts(branch.prompt_until(pending.id)) == [
        ("user", "First question"),
        ("assistant", "First answer"),
        ("user", "Second question"),
    ]  # the empty answer being generated is left out

    edited = branch.add("user", "First question, edited", parent_id=None)  # an edit: a new branch from the start
    again = branch.add("assistant", "", parent_id=edited.id, status="generating")
    assert texts(branch.prompt_until(again.id)) == [("user", "First question, edited")]  # nothing of the old branch
    assert [m.id for m in branch.messages] == [m.id for m in store.branches(conversation.id).path]

    store.choose(question.id)  # back to the first branch: its tree changed shape, so it is read again
    tree = branch.read()
    assert tree.position(question.id) == (0, 2)
    assert [m.id for m in branch.messages] == [question.id, answer.id, follow_up.id, pending.id]
    branch.update(pending.id, "Half an answer", status="stopped")
    assert texts(branch.prompt_until(pending.id))[-1] == ("assistant", "Half an answer")  # continued as far as it got
    assert texts(branch.prompt_until(answer.id)) == [("user", "First question"), ("assistant", "First answer")]
    assert store.branches(conversation.id).path[-1].content == "Half an answer"


def test_regenerating_an_earlier_answer_cuts_the_branch_there(store: HistoryStore) -> None:
    conversation = store.create_conversation("Regenerate")
    branch = ShownBranch(store)
    branch.show(conversation.id)
    question = branch.add("user", "q1", parent_id=None)
    answer = branch.add("assistant", "a1", parent_id=question.id)
    later = branch.add("user", "q2", parent_id=answer.id)
    branch.add("assistant", "a2", parent_id=later.id)
    sibling = branch.add("assistant", "", parent_id=question.id, status="generating")
    assert [m.id for m in branch.messages] == [question.id, sibling.id]
    assert [m.id for m in branch.messages] == [m.id for m in store.branches(conversation.id).path]
    assert texts(branch.prompt_until(sibling.id)) == [("user", "q1")]


def test_an_answer_costs_no_reread_of_the_conversation(store: HistoryStore) -> None:
    conversation = store.create_conversation("Quiet")
    branch = ShownBranch(store)
    branch.show(conversation.id)
    first = branch.add("user", "hello", parent_id=None)
    branch.read()
    statements: list[str] = []
    store.connection.set_trace_callback(statements.append)
    try:
        answer = branch.add("assistant", "", parent_id=first.id, status="generating")
        branch.prompt_until(answer.id)
        branch.update(answer.id, "hi there", status="complete", mode="plain", stats={"new_tokens": 2})
        follow_up = branch.add("user", "and then?", parent_id=answer.id)
        prompt = branch.prompt_until(follow_up.id)
    finally:
        store.connection.set_trace_callback(None)
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM MESSAGES" in s.upper()] == []
    assert texts(prompt) == [("user", "hello"), ("assistant", "hi there"), ("user", "and then?")]
    assert branch.messages[1].status == "complete" and branch.messages[1].stats == {"new_tokens": 2}


def test_writes_elsewhere_and_failed_writes_leave_the_branch_as_it_is(store: HistoryStore) -> None:
    other = store.create_conversation("Left while answering")
    elsewhere = store.add_message(other.id, "assistant", "", status="generating")
    conversation = store.create_conversation("On show")
    branch = ShownBranch(store)
    branch.show(conversation.id)
    question = branch.add("user", "hello", parent_id=None)
    branch.update(elsewhere.id, "finished after its chat was left", status="complete")
    assert texts(branch.messages) == [("user", "hello")]
    assert store.messages(other.id)[0].content == "finished after its chat was left"

    pages = store.connection.execute("PRAGMA page_count").fetchone()[0]
    store.connection.execute(f"PRAGMA max_page_count = {pages}")  # a full disk
    with pytest.raises(HistoryError):
        branch.add("assistant", "x " * 60_000, parent_id=question.id)
    with pytest.raises(HistoryError):
        branch.update(question.id, "y " * 60_000)
    assert texts(branch.messages) == [("user", "hello")]
