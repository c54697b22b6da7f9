"""The SQLite chat history: storage, search, crash recovery, migrations, export, disk-full errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from core.chat.history import (
    HISTORY_FILE,
    SCHEMA_VERSION,
    HistoryDamaged,
    HistoryError,
    HistoryStore,
    migrate,
    open_history,
    recent_answers,
)


@pytest.fixture
def store(tmp_path: Path):
    s = HistoryStore(tmp_path / "history.sqlite3")
    yield s
    s.close()


def test_conversations_and_messages_round_trip(store: HistoryStore) -> None:
    conv = store.create_conversation("Binary search")
    store.add_message(conv.id, "user", "Write a binary search")
    answer = store.add_message(conv.id, "assistant", "", status="generating")
    store.update_message(
        answer.id,
        "def search(xs, x): ...",
        status="complete",
        mode="lookahead W4 N4 G4",
        stats={"tokens_per_second": 31.5, "tokens_per_step": 1.8},
    )
    messages = store.messages(conv.id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == "def search(xs, x): ..."
    assert messages[1].mode == "lookahead W4 N4 G4"
    assert messages[1].stats == {"tokens_per_second": 31.5, "tokens_per_step": 1.8}
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_search_matches_title_and_text_and_rename_delete(store: HistoryStore) -> None:
    a = store.create_conversation("Packing list")
    b = store.create_conversation("Other")
    store.add_message(b.id, "user", "what is 100% of a_b?")
    assert [c.id for c in store.conversations("packing")] == [a.id]
    assert [c.id for c in store.conversations("100%")] == [b.id]
    assert [c.id for c in store.conversations("a_b")] == [b.id]
    assert store.conversations("zzz") == []
    store.rename(a.id, "Trip")
    assert store.conversation(a.id).title == "Trip"
    store.delete(b.id)
    assert [c.id for c in store.conversations()] == [a.id]
    assert store.connection.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_an_edit_is_a_new_branch_and_the_old_one_stays_reachable(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / HISTORY_FILE)
    conv = store.create_conversation("t")
    q1 = store.add_message(conv.id, "user", "1")
    a1 = store.add_message(conv.id, "assistant", "2")
    q2 = store.add_message(conv.id, "user", "3")
    store.add_message(conv.id, "assistant", "4")
    edited = store.add_message(conv.id, "user", "3, edited", parent_id=a1.id)
    store.add_message(conv.id, "assistant", "4 again", parent_id=edited.id)
    assert [m.content for m in store.messages(conv.id)] == ["1", "2", "3, edited", "4 again"]
    branches = store.branches(conv.id)
    assert branches.siblings(edited.id) == [q2.id, edited.id] and branches.position(edited.id) == (1, 2)
    assert branches.position(q1.id) == (0, 1)
    store.choose(q2.id)
    assert [m.content for m in store.messages(conv.id)] == ["1", "2", "3", "4"]
    store.close()
    reopened = HistoryStore(tmp_path / HISTORY_FILE)  # the tree and the chosen branch are saved
    assert [m.content for m in reopened.messages(conv.id)] == ["1", "2", "3", "4"]
    reopened.add_message(conv.id, "user", "5")  # appended to the chosen branch
    reopened.choose(edited.id)
    assert [m.content for m in reopened.messages(conv.id)] == ["1", "2", "3, edited", "4 again"]
    reopened.choose(q2.id)  # switching back shows the continuation chosen there before
    assert [m.content for m in reopened.messages(conv.id)] == ["1", "2", "3", "4", "5"]
    reopened.close()


def test_regenerated_answers_are_siblings_and_a_first_message_can_branch(store: HistoryStore) -> None:
    conv = store.create_conversation("t")
    q = store.add_message(conv.id, "user", "q")
    answers = [store.add_message(conv.id, "assistant", f"a{i}", parent_id=q.id) for i in range(3)]
    assert [m.content for m in store.messages(conv.id)] == ["q", "a2"]
    assert store.branches(conv.id).position(answers[0].id) == (0, 3)
    other = store.add_message(conv.id, "user", "q, edited", parent_id=None)
    assert [m.content for m in store.messages(conv.id)] == ["q, edited"]
    assert store.branches(conv.id).siblings(other.id) == [q.id, other.id]


def test_the_system_prompt_is_kept_per_conversation(store: HistoryStore) -> None:
    plain = store.create_conversation("default prompt")
    own = store.create_conversation("own prompt", system_prompt="Answer in French.")
    assert plain.system_prompt is None and store.conversation(own.id).system_prompt == "Answer in French."
    store.set_system_prompt(plain.id, "")
    assert store.conversation(plain.id).system_prompt == ""  # none at all, not the default
    assert {c.id: c.system_prompt for c in store.conversations()} == {plain.id: "", own.id: "Answer in French."}


def test_answer_left_generating_is_marked_interrupted_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    s = HistoryStore(path)
    conv = s.create_conversation("t")
    msg = s.add_message(conv.id, "assistant", "", status="generating")
    s.update_message(msg.id, "partial text")
    s.connection.close()  # no clean shutdown
    again = HistoryStore(path)
    assert again.recovered == 1
    [m] = again.messages(conv.id)
    assert (m.content, m.status) == ("partial text", "interrupted")
    again.close()


def test_migration_from_version_1_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, target=1)
    conn.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'old', 1.0, 2.0)")
    conn.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'user', 'hello', 1.0)")
    conn.close()
    s = HistoryStore(path)
    assert s.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    [m] = s.messages(1)
    assert (m.content, m.status, m.mode, m.stats) == ("hello", "complete", None, None)
    s.close()


def test_migration_from_version_2_turns_each_chat_into_one_branch_and_keeps_every_text(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, target=2)
    conn.executescript(
        """
        INSERT INTO conversations (id, title, created, updated) VALUES (1, 'first', 1.0, 2.0), (2, 'second', 3.0, 4.0);
        INSERT INTO messages (id, conversation_id, role, content, created) VALUES
            (1, 1, 'user', 'hello', 1.0), (2, 2, 'user', 'other chat', 1.5), (3, 1, 'assistant', 'hi there', 2.0),
            (4, 1, 'user', 'and now?', 2.5), (5, 2, 'assistant', 'sure', 3.0);
        UPDATE messages SET status = 'truncated', mode = 'plain', stats = '{"new_tokens": 7}' WHERE id = 3;
        """
    )
    conn.close()
    s = HistoryStore(path)
    assert s.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    first = s.messages(1)
    assert [(m.id, m.parent_id, m.content) for m in first] == [
        (1, None, "hello"),
        (3, 1, "hi there"),
        (4, 3, "and now?"),
    ]
    assert (first[1].status, first[1].mode, first[1].stats) == ("truncated", "plain", {"new_tokens": 7})
    assert [(m.parent_id, m.content) for m in s.messages(2)] == [(None, "other chat"), (2, "sure")]
    assert all(s.branches(c).position(m.id) == (0, 1) for c in (1, 2) for m in s.messages(c))
    assert s.conversation(1).system_prompt is None  # old chats keep following the default from Settings
    s.add_message(1, "user", "after the upgrade")
    assert [m.content for m in s.messages(1)][-2:] == ["and now?", "after the upgrade"]
    s.close()


def test_newer_schema_is_refused_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(HistoryError, match="newer version"):
        HistoryStore(path)


def test_export_markdown_and_json(store: HistoryStore) -> None:
    conv = store.create_conversation("Fib")
    store.add_message(conv.id, "user", "fib?")
    store.add_message(
        conv.id,
        "assistant",
        "```python\ndef fib(n): ...\n```",
        mode="plain",
        stats={"tokens_per_second": 12.0},
        status="stopped",
    )
    md = store.export_markdown(conv.id)
    assert md.startswith("# Fib\n")
    assert "## Assistant (plain, 12.0 tok/s) [stopped]" in md
    assert "def fib(n)" in md
    data = json.loads(json.dumps(store.export_json(conv.id)))
    assert data["title"] == "Fib" and data["messages"][1]["mode"] == "plain"
    assert data["other_branches"] == [] and data["system_prompt"] is None


def test_export_shows_the_active_branch_and_keeps_the_others_in_json(store: HistoryStore) -> None:
    conv = store.create_conversation("Branches", system_prompt="Be brief.")
    q = store.add_message(conv.id, "user", "old question")
    store.add_message(conv.id, "assistant", "old answer")
    new = store.add_message(conv.id, "user", "new question", parent_id=None)
    store.add_message(conv.id, "assistant", "new answer")
    md = store.export_markdown(conv.id)
    assert "## System\n\nBe brief." in md and "new answer" in md and "old" not in md
    data = store.export_json(conv.id)
    assert [m["content"] for m in data["messages"]] == ["new question", "new answer"]
    assert [(m["content"], m["parent_id"]) for m in data["other_branches"]] == [
        ("old question", None),
        ("old answer", q.id),
    ]
    assert data["messages"][1]["parent_id"] == new.id and data["system_prompt"] == "Be brief."


def test_full_disk_raises_a_history_error_and_keeps_the_store_usable(store: HistoryStore) -> None:
    conv = store.create_conversation("t")
    pages = store.connection.execute("PRAGMA page_count").fetchone()[0]
    store.connection.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(HistoryError, match="disk is full"):
        store.add_message(conv.id, "assistant", "x" * 200_000)
    store.connection.execute("PRAGMA max_page_count = 1000000")
    store.add_message(conv.id, "assistant", "fits now")
    assert [m.content for m in store.messages(conv.id)] == ["fits now"]


def damaged_history(data_dir: Path) -> bytes:
    """A real history cut to its first 8 KiB (`head -c 8192`, issue 15); returns the bytes left."""
    store = HistoryStore(data_dir / HISTORY_FILE)
    conv = store.create_conversation("Long chat")
    for i in range(60):
        store.add_message(conv.id, "user", f"message {i} " + "x" * 500)
    store.close()
    path = data_dir / HISTORY_FILE
    path.write_bytes(path.read_bytes()[:8192])
    return path.read_bytes()


def test_a_damaged_history_is_moved_aside_and_a_new_one_started(tmp_path: Path) -> None:
    damaged = damaged_history(tmp_path)
    with pytest.raises(HistoryDamaged):
        HistoryStore(tmp_path / HISTORY_FILE)
    store, problem = open_history(tmp_path)
    [aside] = tmp_path.glob("history.damaged-*.sqlite3")
    assert aside.read_bytes() == damaged  # kept, byte for byte
    assert problem is not None and "is damaged" in problem and str(aside) in problem and "new, empty history" in problem
    assert "writable" not in problem and "Restart" not in problem  # it was set aside already: nothing left to do
    assert store.path == tmp_path / HISTORY_FILE  # a real file again, not a memory-only session
    assert_keeps_chats_and_the_next_start_is_clean(store, tmp_path)


def assert_keeps_chats_and_the_next_start_is_clean(store: HistoryStore, folder: Path) -> None:
    """The history that replaced a file set aside saves a chat, and the next start finds it with no notice."""
    conv = store.create_conversation("after")
    store.add_message(conv.id, "user", "kept")
    store.close()
    again, problem = open_history(folder)
    assert problem is None and [c.title for c in again.conversations()] == ["after"]
    again.close()


def foreign_sqlite(path: Path, schema: str, version: int = 0) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(f"{schema}; PRAGMA user_version = {version};")
    conn.execute("INSERT INTO " + schema.split()[2] + " VALUES (1)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("table of our name", "it holds tables Lookahead Chat did not make: conversations"),
        ("tables of its own", "it holds tables Lookahead Chat did not make: notes"),
        ("our version, not our columns", "its conversations table lacks id, title, created, updated, system_prompt"),
        ("a negative version", "its schema version -2147483648 is not one Lookahead Chat writes"),  # an IndexError once
        ("a folder", "it is a folder"),
    ],
)
def test_a_file_that_is_not_our_history_is_set_aside_untouched(kind: str, reason: str, tmp_path: Path) -> None:
    """Issue 28: such files ended in 'table conversations already exists. Check that the folder is writable'
    or 'unable to open database file', and every later session ran without history."""
    path = tmp_path / HISTORY_FILE
    if kind == "table of our name":
        foreign_sqlite(path, "CREATE TABLE conversations (x)")
    elif kind == "tables of its own":  # migrating would have written our tables into another program's file
        foreign_sqlite(path, "CREATE TABLE notes (x)")
    elif kind == "our version, not our columns":
        foreign_sqlite(path, "CREATE TABLE conversations (x)", version=SCHEMA_VERSION)
    elif kind == "a negative version":  # a damaged header's bytes 60-63, as the property test met them
        foreign_sqlite(path, "CREATE TABLE conversations (x)", version=-(2**31))
    else:
        path.mkdir()
        (path / "inside.txt").write_text("kept")
    before = path.read_bytes() if path.is_file() else None
    store, problem = open_history(tmp_path)
    [aside] = tmp_path.glob("history.foreign-*.sqlite3")
    if before is None:
        assert [p.name for p in aside.iterdir()] == ["inside.txt"]
    else:
        assert aside.read_bytes() == before  # never written to
    assert problem == (
        f"{path} is not a Lookahead Chat history ({reason}). It was kept as {aside}; a new, empty history was started."
    )
    assert store.path == path and path.is_file()  # a real history again, not a memory-only session
    assert_keeps_chats_and_the_next_start_is_clean(store, tmp_path)


def test_damage_in_the_last_page_is_caught_at_open(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / HISTORY_FILE)
    conv = store.create_conversation("t")
    for _ in range(60):
        store.add_message(conv.id, "user", "y" * 500)
    store.close()
    data = bytearray((tmp_path / HISTORY_FILE).read_bytes())
    data[-4096:] = b"\xff" * 4096  # the last page: a leaf of messages the first queries never read
    (tmp_path / HISTORY_FILE).write_bytes(bytes(data))
    _, problem = open_history(tmp_path)
    assert problem is not None and "damaged" in problem
    assert len(list(tmp_path.glob("history.damaged-*.sqlite3"))) == 1


def test_text_that_is_not_utf8_reads_as_damage_not_a_crash(tmp_path: Path) -> None:
    """sqlite hands such bytes to Python, whose decoding raises UnicodeDecodeError (hypothesis found it)."""
    store = HistoryStore(tmp_path / HISTORY_FILE)
    conv = store.create_conversation("t")
    store.add_message(conv.id, "user", "fine")
    store.connection.execute("UPDATE messages SET content = CAST(x'80ff' AS TEXT)")
    with pytest.raises(HistoryDamaged, match="damaged"):
        store.messages(conv.id)
    store.close()


def test_a_newer_history_is_never_moved_aside(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / HISTORY_FILE)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    store, problem = open_history(tmp_path)
    assert "newer version" in problem and "will not be kept" in problem
    assert store.path == Path(":memory:")
    assert [p.name for p in tmp_path.iterdir()] == [HISTORY_FILE]


def test_export_closes_the_code_fence_of_a_cut_off_answer_and_marks_it(store: HistoryStore) -> None:
    conv = store.create_conversation("Code")
    store.add_message(conv.id, "user", "Write fib and a test")
    store.add_message(conv.id, "assistant", "Here:\n\n```python\ndef fib(n):\n    if n < 2", status="truncated")
    store.add_message(conv.id, "user", "And in JS?")
    store.add_message(conv.id, "assistant", "~~~~js\nconst x = 1;\n~~~\n", status="stopped")
    md = store.export_markdown(conv.id)
    assert "## Assistant [truncated]\n\nHere:\n\n```python\ndef fib(n):\n    if n < 2\n```\n" in md
    assert "## Assistant [stopped]\n\n~~~~js\nconst x = 1;\n~~~\n~~~~\n" in md
    assert md.count("```") == 2 and "## User\n\nAnd in JS?" in md  # the next turn is not swallowed by a fence
    assert store.messages(conv.id)[1].content.endswith("if n < 2")  # the stored text is unchanged


@pytest.mark.parametrize(
    "text",
    ["", "plain words", "```py\nx = 1\n```", "```\na\n```\n\n```\nb\n```\n", "``inline``", "```\n````\n"],
)
def test_export_leaves_closed_or_no_fences_alone(text: str) -> None:
    from core.chat.history import close_code_fence

    assert close_code_fence(text) == text


def test_unreadable_figures_do_not_hide_the_message(store: HistoryStore) -> None:
    conv = store.create_conversation("t")
    message = store.add_message(conv.id, "assistant", "the text", stats={"tokens_per_second": 3.0})
    for garbage in ("{not json", "[1, 2]", "7"):
        store.connection.execute("UPDATE messages SET stats = ? WHERE id = ?", (garbage, message.id))
        [read] = store.messages(conv.id)
        assert (read.content, read.stats) == ("the text", None)


def test_recent_answers_are_read_newest_first_up_to_a_size_and_given_oldest_first(store, tmp_path: Path) -> None:
    """What seeds a loaded model's memory of its answers: read while the store stays open and writing."""
    chat = store.create_conversation("c")
    for n in range(4):
        store.add_message(chat.id, "user", f"question {n}")
        store.add_message(chat.id, "assistant", f"answer number {n}")
    assert recent_answers(tmp_path, 10_000) == [f"answer number {n}" for n in range(4)]
    assert recent_answers(tmp_path, 20) == ["answer number 2", "answer number 3"]  # stops once 20 characters are in
    assert recent_answers(tmp_path / "elsewhere", 100) == []


def test_recent_answers_of_a_damaged_history_are_none(tmp_path: Path) -> None:
    (tmp_path / HISTORY_FILE).write_bytes(b"not a database at all" * 100)
    assert recent_answers(tmp_path, 100) == []
