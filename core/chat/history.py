"""Chat history in SQLite (WAL): conversations and messages, schema migrations, export.

Messages form a tree (core.chat.branches): an edited message or a regenerated answer is a new
sibling, and ``chosen`` ranks siblings (the highest, the latest chosen or added, is shown). Each
conversation keeps its own system prompt (none recorded: the default from Settings).

The answer being generated is stored with status ``generating`` and rewritten as it grows; a
store opened after a crash marks such answers ``interrupted`` (one app instance per data folder,
so an answer still being generated elsewhere is never mislabelled). :func:`open_history` sets a
damaged file, or one that is not our history, aside and starts a new one.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.aside import move_aside
from core.chat.branches import Branches

log = logging.getLogger(__name__)

HISTORY_FILE = "history.sqlite3"
STATUSES = ("complete", "generating", "stopped", "interrupted", "truncated")
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
DAMAGED_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
FENCE = re.compile(r"(`{3,}|~{3,})")  # a Markdown code fence at the start of a line

# Migration i (1-based) brings the schema from version i-1 to version i. Never edit one that shipped.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created REAL NOT NULL
    );
    """,
    """
    ALTER TABLE messages ADD COLUMN status TEXT NOT NULL DEFAULT 'complete';
    ALTER TABLE messages ADD COLUMN mode TEXT;
    ALTER TABLE messages ADD COLUMN stats TEXT;
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER;
    ALTER TABLE messages ADD COLUMN chosen INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE conversations ADD COLUMN system_prompt TEXT;
    UPDATE messages SET parent_id = (
        SELECT MAX(earlier.id) FROM messages AS earlier
        WHERE earlier.conversation_id = messages.conversation_id AND earlier.id < messages.id
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
AT_END = -1  # add_message's default parent: the last message of the conversation's active branch
CONVERSATION_COLUMNS = "id, title, created, updated, system_prompt"
MESSAGE_COLUMNS = "id, conversation_id, role, content, created, status, mode, stats, parent_id"
# A rank above every other of the message's conversation (parameter: the message's id).
NEXT_RANK = (
    "(SELECT COALESCE(MAX(chosen), 0) + 1 FROM messages WHERE conversation_id = "
    "(SELECT conversation_id FROM messages WHERE id = ?))"
)


class HistoryError(Exception):
    """Saving or reading the history failed; ``str(err)`` says what happened and what to do."""


class HistoryDamaged(HistoryError):
    """The history file is not a readable SQLite database (truncated, overwritten, corrupt).

    :func:`open_history` sets such a file aside under :attr:`tag`; :meth:`kept_as` and :meth:`stuck`
    are its notices, which say what already happened (``str(err)`` is for a read that fails later on).
    """

    tag = "damaged"

    def __init__(self, path: Path, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(
            f"{self.headline} ({reason}). Restart Lookahead Chat: it sets the file aside and starts a new one."
        )

    @property
    def headline(self) -> str:
        return f"The chat history file {self.path} is damaged"

    def kept_as(self, aside: Path) -> str:
        return f"{self.headline} ({self.reason}). It was kept as {aside}"

    def stuck(self, why: str) -> str:
        return (
            f"{self.headline} ({self.reason}), and it could not be moved aside ({why}). Chats of this session "
            f"will not be kept: move or rename {self.path} yourself, then restart Lookahead Chat."
        )


class HistoryForeign(HistoryDamaged):
    """Something that is not our history is where it should be: another program's database, a folder."""

    tag = "foreign"

    @property
    def headline(self) -> str:
        return f"{self.path} is not a Lookahead Chat history"


@dataclass(frozen=True)
class Conversation:
    """A chat; ``system_prompt`` None means the default system prompt from Settings."""

    id: int
    title: str
    created: float
    updated: float
    system_prompt: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    """One message; assistant messages carry the mode that produced them and its figures.

    ``parent_id`` is the message it follows (None: the first message of a branch from the start).
    """

    id: int
    conversation_id: int
    role: str
    content: str
    created: float
    status: str = "complete"
    mode: str | None = None
    stats: dict[str, Any] | None = field(default=None)
    parent_id: int | None = None


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply the migrations from the database's version up to ``target``; returns the old version.

    Raises:
        HistoryError: the file was written by a newer version of the app.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"The chat history was written by a newer version of Lookahead Chat (schema {version}, "
            f"this version knows {SCHEMA_VERSION}). Update the app to open it."
        )
    for number in range(version + 1, target + 1):
        log.info("migrating chat history to schema %d", number)
        try:
            conn.executescript(f"BEGIN; {MIGRATIONS[number - 1]} PRAGMA user_version = {number}; COMMIT;")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return version


class HistoryStore:
    """The chat history database. Use from one thread (the GUI thread)."""

    def __init__(self, path: Path) -> None:
        """Open (or create) the database at ``path``.

        Raises:
            HistoryDamaged: the file is not a readable database, or (HistoryForeign) not our history
                (see :func:`open_history`).
            HistoryError: it cannot be opened for another reason (permissions, a newer schema).
        """
        self.path = path
        if path.exists() and not path.is_file():  # sqlite would say only "unable to open database file"
            raise HistoryForeign(path, "it is a folder" if path.is_dir() else "it is not a file")
        conn: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = conn = sqlite3.connect(path, isolation_level=None)
            _migrate_ours(conn, path)
            conn.execute("PRAGMA journal_mode = WAL")  # after the checks: it rewrites the header of the file
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            self.recovered = self._mark_interrupted()
        except (sqlite3.Error, UnicodeDecodeError, HistoryError) as err:
            if conn is not None:
                conn.close()
            if isinstance(err, HistoryError):
                raise
            raise _history_error(err, path) from err
        except OSError as err:
            raise HistoryError(
                f"The chat history folder {path.parent} could not be created ({err.strerror or err}). "
                "Check that the folder is writable."
            ) from err

    @classmethod
    def in_folder(cls, data_dir: Path) -> HistoryStore:
        return cls(data_dir / HISTORY_FILE)

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()

    def conversations(self, query: str = "") -> list[Conversation]:
        """Conversations, newest first; ``query`` filters by title or message text (case-insensitive)."""
        sql = f"SELECT {CONVERSATION_COLUMNS} FROM conversations"
        args: tuple[Any, ...] = ()
        if query.strip():
            like = f"%{_escape_like(query.strip())}%"
            sql += (
                " WHERE title LIKE ? ESCAPE '\\' OR id IN "
                "(SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\')"
            )
            args = (like, like)
        rows = self._read(sql + " ORDER BY updated DESC, id DESC", args)
        return [Conversation(*row) for row in rows]

    def conversation(self, conversation_id: int) -> Conversation | None:
        rows = self._read(f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,))
        return Conversation(*rows[0]) if rows else None

    def create_conversation(self, title: str, system_prompt: str | None = None) -> Conversation:
        now = time.time()
        cur = self._write(
            "INSERT INTO conversations (title, created, updated, system_prompt) VALUES (?, ?, ?, ?)",
            (title, now, now, system_prompt),
        )
        return Conversation(int(cur.lastrowid), title, now, now, system_prompt)

    def set_system_prompt(self, conversation_id: int, system_prompt: str | None) -> None:
        """The conversation's own system prompt ("" for none; None: the default from Settings)."""
        self._write("UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id))

    def rename(self, conversation_id: int, title: str) -> None:
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        """The messages of the conversation's active branch, in order."""
        return self.branches(conversation_id).path

    def branches(self, conversation_id: int) -> Branches[StoredMessage]:
        """All messages of the conversation as a tree of branches."""
        rows = self._read(
            f"SELECT {MESSAGE_COLUMNS}, chosen FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        messages = [StoredMessage(*row[:7], _load_stats(row[7]), row[8]) for row in rows]
        return Branches(messages, {row[0]: row[9] for row in rows})

    def choose(self, message_id: int) -> None:
        """Make a message the shown one among its siblings (switch to its branch)."""
        self._write(f"UPDATE messages SET chosen = {NEXT_RANK} WHERE id = ?", (message_id, message_id))

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        parent_id: int | None = AT_END,
        status: str = "complete",
        mode: str | None = None,
        stats: dict[str, Any] | None = None,
    ) -> StoredMessage:
        """Add a message after ``parent_id`` (by default at the end of the active branch) as the shown
        one among its siblings, and mark the conversation as updated."""
        now = time.time()
        with self._transaction():
            if parent_id == AT_END:
                path = self.branches(conversation_id).path
                parent_id = path[-1].id if path else None
            cur = self._conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created, status, mode, stats, parent_id, chosen) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(chosen), 0) + 1 FROM messages WHERE conversation_id = ?))",
                (conversation_id, role, content, now, _status(status), mode, _dump(stats), parent_id, conversation_id),
            )
            self._conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return StoredMessage(int(cur.lastrowid), conversation_id, role, content, now, status, mode, stats, parent_id)

    def update_message(
        self,
        message_id: int,
        content: str,
        *,
        status: str | None = None,
        mode: str | None = None,
        stats: dict[str, Any] | None = None,
    ) -> None:
        """Rewrite a message's text; status, mode and stats change only when given."""
        sets, args = ["content = ?"], [content]
        for column, value in (("status", status and _status(status)), ("mode", mode), ("stats", _dump(stats))):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        self._write(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """The conversation as a JSON-ready dict: title, times, system prompt, the active branch's messages
        (with modes and figures) and, under ``other_branches``, every other message (``parent_id`` links them)."""
        conv = self.conversation(conversation_id)
        if conv is None:
            raise HistoryError("That conversation no longer exists.")
        branches = self.branches(conversation_id)
        active = {m.id for m in branches.path}
        others = [m for m in branches.by_id.values() if m.id not in active]
        return {
            "title": conv.title,
            "created": conv.created,
            "updated": conv.updated,
            "system_prompt": conv.system_prompt,
            "messages": [_message_json(m) for m in branches.path],
            "other_branches": [_message_json(m) for m in others],
        }

    def export_markdown(self, conversation_id: int) -> str:
        """The conversation as Markdown: a heading, then each turn under its speaker."""
        data = self.export_json(conversation_id)
        parts = [f"# {data['title']}\n"]
        if data["system_prompt"]:
            parts.append(f"## System\n\n{data['system_prompt']}\n")
        for m in data["messages"]:
            note = ""
            if m["role"] == "assistant" and m["mode"]:
                note = f" ({m['mode']}"
                if m["stats"] and m["stats"].get("tokens_per_second"):
                    note += f", {m['stats']['tokens_per_second']:.1f} tok/s"
                note += ")"
            if m["status"] in ("stopped", "interrupted", "truncated"):
                note += f" [{m['status']}]"
            parts.append(f"## {m['role'].title()}{note}\n\n{close_code_fence(m['content'])}\n")
        return "\n".join(parts)

    def _mark_interrupted(self) -> int:
        cur = self._conn.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'generating'")
        if cur.rowcount:
            log.warning("marked %d answer(s) interrupted by a crash", cur.rowcount)
        return cur.rowcount

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as err:
            raise _history_error(err, self.path) from err

    def _write(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
        with self._transaction():
            return self._conn.execute(sql, args)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN ... COMMIT, ROLLBACK on error; sqlite errors become :class:`HistoryError`."""
        try:
            self._conn.execute("BEGIN")
            yield
            self._conn.execute("COMMIT")
        except BaseException as err:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(err, sqlite3.Error):
                raise _history_error(err, self.path) from err
            raise


def _migrate_ours(conn: sqlite3.Connection, path: Path) -> None:
    """Migrate the database if it is a history of ours (or new and empty); never write into anything else
    (a migration that meets tables of another shape fails, and is rolled back).

    Raises:
        HistoryForeign: it holds tables we did not make, or lacks ours after the migrations.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if version == 0 and tables:  # each migration sets the version with its tables: these are not ours
        raise HistoryForeign(path, f"it holds tables Lookahead Chat did not make: {', '.join(tables)}")
    if version < 0:  # ours count up from 0; a negative one (another program's, or a damaged header) is not ours
        raise HistoryForeign(path, f"its schema version {version} is not one Lookahead Chat writes")
    try:
        migrate(conn)
    except sqlite3.Error as err:
        if getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_ERROR:  # our SQL met tables of another shape
            raise HistoryForeign(path, f"its tables are not ours: {err}") from err
        raise
    for table, columns in (("conversations", CONVERSATION_COLUMNS), ("messages", f"{MESSAGE_COLUMNS}, chosen")):
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in columns.split(", ") if c not in have]
        if not have:
            raise HistoryForeign(path, f"it has no {table} table")
        if missing:
            raise HistoryForeign(path, f"its {table} table lacks {', '.join(missing)}")


def open_history(data_dir: Path) -> tuple[HistoryStore, str | None]:
    """The history in ``data_dir`` and, when it could not be used as it was, what the user should be told.

    A damaged file, or one that is not our history (another program's database, a folder), is moved
    aside with its journal files under a dated name, never deleted, and a new history is started in
    its place. When no file can be used, the history lives in memory for this session. Never raises.
    """
    path = data_dir / HISTORY_FILE
    try:
        return HistoryStore(path), None
    except HistoryDamaged as err:
        damage = err
    except HistoryError as err:
        return HistoryStore(Path(":memory:")), f"{err} Chats of this session will not be kept."
    try:
        aside = move_aside(path, damage.tag, SQLITE_COMPANIONS)
    except OSError as err:
        return HistoryStore(Path(":memory:")), damage.stuck(err.strerror or str(err))
    log.warning("unusable chat history (%s) moved to %s", damage.reason, aside)
    try:
        return HistoryStore(path), f"{damage.kept_as(aside)}; a new, empty history was started."
    except HistoryError as err:
        return HistoryStore(Path(":memory:")), (
            f"{damage.kept_as(aside)}. A new one could not be started either: {err} "
            "Chats of this session will not be kept."
        )


def recent_answers(data_dir: Path, max_chars: int) -> list[str]:
    """The newest assistant messages of the history in ``data_dir``, oldest first, about ``max_chars`` of text
    in all. Read-only, from any thread (the GUI thread's store keeps writing); empty where there is no
    readable history: what it feeds (the model's memory of its answers) is an aid, never a reason to fail."""
    path = data_dir / HISTORY_FILE
    if not path.is_file():
        return []
    texts: list[str] = []
    total = 0
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT content FROM messages WHERE role = 'assistant' ORDER BY id DESC")
            for (content,) in rows:
                if total >= max_chars:
                    break
                texts.append(content)
                total += len(content)
        finally:
            conn.close()
    except sqlite3.Error as err:
        log.warning("chat history not read for the model's memory: %s", err)
        return []
    return texts[::-1]


def close_code_fence(text: str) -> str:
    """``text`` with a code fence left open (an answer cut off inside a code block) closed again."""
    fence = ""
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if match is None:
            continue
        marker = match.group(1)
        if not fence:
            fence = marker
        elif marker[0] == fence[0] and len(marker) >= len(fence) and line.strip() == marker:
            fence = ""
    if not fence:
        return text
    return text + ("" if text.endswith("\n") else "\n") + fence


def _history_error(err: sqlite3.Error | UnicodeDecodeError, path: Path) -> HistoryError:
    code = getattr(err, "sqlite_errorcode", None)
    not_utf8 = isinstance(err, UnicodeDecodeError) or "Could not decode to UTF-8" in str(err)  # damaged text
    if code in DAMAGED_CODES or not_utf8:
        return HistoryDamaged(path, str(err))
    if code == sqlite3.SQLITE_FULL or "full" in str(err).lower():
        return HistoryError(
            f"Could not save the chat: the disk is full ({path.parent}). "
            "Free some disk space; the text stays in the window and is saved when there is room again."
        )
    return HistoryError(f"The chat history ({path}) could not be used: {err}. Check that the folder is writable.")


def _message_json(m: StoredMessage) -> dict[str, Any]:
    return {
        "id": m.id,
        "parent_id": m.parent_id,
        "role": m.role,
        "content": m.content,
        "created": m.created,
        "status": m.status,
        "mode": m.mode,
        "stats": m.stats,
    }


def _status(status: str) -> str:
    if status not in STATUSES:
        raise ValueError(f"message status must be one of {', '.join(STATUSES)} (got {status!r})")
    return status


def _load_stats(text: str | None) -> dict[str, Any] | None:
    """An answer's saved figures; None when absent or unreadable (the text matters, the figures do not)."""
    try:
        stats = json.loads(text) if text else None
    except (ValueError, TypeError, RecursionError):
        return None
    return stats if isinstance(stats, dict) else None


def _dump(stats: dict[str, Any] | None) -> str | None:
    return json.dumps(stats) if stats is not None else None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
