"""The active branch of the conversation on show, as the history store holds it; the model's prompt comes from it.

It is read from the store when a conversation opens or its tree changes shape (an edit, a
regenerated answer, a branch switch) and kept current by the writes made through it, so an
answer costs no re-read of the conversation. No Qt here: the chat controller owns one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.chat.branches import Branches
from core.chat.history import HistoryStore, StoredMessage
from core.chat.prompt import Message


class ShownBranch:
    """The stored messages of one conversation's active branch, first to last.

    Writes go to the store first and change the branch only when the store took them; a failed
    write raises :class:`core.chat.history.HistoryError` and leaves the branch as it was.
    """

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self.conversation_id: int | None = None
        self.messages: list[StoredMessage] = []

    def show(self, conversation_id: int | None) -> None:
        """Follow ``conversation_id`` (None: a new chat, not stored yet); nothing is read until :meth:`read`."""
        self.conversation_id = conversation_id
        self.messages = []

    def read(self) -> Branches[StoredMessage]:
        """Read the conversation's tree; its active path becomes the branch. Returns the tree (siblings, positions)."""
        assert self.conversation_id is not None
        tree = self.store.branches(self.conversation_id)
        self.messages = list(tree.path)
        return tree

    def add(self, role: str, content: str, *, parent_id: int | None, status: str = "complete") -> StoredMessage:
        """Store a message after ``parent_id`` (None: a first message) in the conversation on show.

        The store makes a new message the shown one among its siblings, so the active branch now
        runs through its parent and ends with it; a parent not on the branch means the branch is
        out of date, and it is read again.
        """
        assert self.conversation_id is not None
        message = self.store.add_message(self.conversation_id, role, content, parent_id=parent_id, status=status)
        ids = [m.id for m in self.messages]
        if parent_id is None:
            self.messages = [message]
        elif parent_id in ids:
            self.messages = [*self.messages[: ids.index(parent_id) + 1], message]
        else:
            self.read()
        return message

    def update(self, message_id: int, content: str, **fields: Any) -> None:
        """Rewrite a stored message's text, and its ``status``, ``mode`` or ``stats`` when given (not None).

        The message may belong to another conversation (an answer that ends after its chat was left).
        """
        self.store.update_message(message_id, content, **fields)
        changes = {name: value for name, value in fields.items() if value is not None}
        self.messages = [replace(m, content=content, **changes) if m.id == message_id else m for m in self.messages]

    def prompt_until(self, message_id: int) -> list[Message]:
        """The conversation as the model gets it: the branch up to ``message_id`` (itself included: an answer
        being continued goes in as far as it got), leaving out answers without text."""
        ids = [m.id for m in self.messages]
        upto = self.messages[: ids.index(message_id) + 1] if message_id in ids else self.messages
        return [Message(m.role, m.content) for m in upto if m.content or m.role == "user"]
