"""A conversation as a tree of branches: the active path, and each message's siblings.

Editing a message or regenerating an answer adds a sibling instead of replacing it; each message
records whether it is the chosen one among its siblings, so every branch stays reachable and
switching back to one shows the continuation that was chosen in it before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class Node(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def parent_id(self) -> int | None: ...


M = TypeVar("M", bound=Node)


class Branches(Generic[M]):
    """The messages of one conversation (any order) and which are chosen among their siblings.

    A message whose parent is missing or not older than itself (a damaged file) counts as a first
    message, so its text stays reachable. Where no sibling is chosen, the newest one is.
    """

    def __init__(self, messages: Iterable[M], chosen: Iterable[int]) -> None:
        self.by_id: dict[int, M] = {m.id: m for m in sorted(messages, key=lambda m: m.id)}
        self._chosen = set(chosen)
        self._parent: dict[int, int | None] = {}
        self._children: dict[int | None, list[int]] = {}
        for message in self.by_id.values():
            parent = message.parent_id
            if parent not in self.by_id or parent >= message.id:
                parent = None
            self._parent[message.id] = parent
            self._children.setdefault(parent, []).append(message.id)
        self.path: list[M] = self._active_path()

    def siblings(self, message_id: int) -> list[int]:
        """Ids of the message and its siblings (same parent), oldest first."""
        return self._children[self._parent[message_id]]

    def position(self, message_id: int) -> tuple[int, int]:
        """(index among its siblings, number of siblings): (0, 1) for a message without alternatives."""
        siblings = self.siblings(message_id)
        return siblings.index(message_id), len(siblings)

    def _active_path(self) -> list[M]:
        path: list[M] = []
        parent: int | None = None
        while children := self._children.get(parent):
            chosen = [c for c in children if c in self._chosen]
            parent = chosen[-1] if chosen else children[-1]
            path.append(self.by_id[parent])
        return path
