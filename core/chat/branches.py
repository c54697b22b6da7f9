"""A conversation as a tree of branches: the active path, and each message's siblings.

Editing a message or regenerating an answer adds a sibling instead of replacing it, so every
branch stays reachable, and switching back to one shows the continuation that was chosen in it before. Each message carries a
rank: among siblings, the one with the highest rank (the most recently chosen or added) is shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, Protocol, TypeVar


class Node(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def parent_id(self) -> int | None: ...


M = TypeVar("M", bound=Node)


class Branches(Generic[M]):
    """The messages of one conversation (any order) and their ranks (missing: 0).

    A message whose parent is missing or not older than itself (a damaged file) counts as a first
    message, so its text stays reachable. Among siblings of equal rank, the newest is shown.
    """

    def __init__(self, messages: Iterable[M], rank: Mapping[int, int]) -> None:
        self.by_id: dict[int, M] = {m.id: m for m in sorted(messages, key=lambda m: m.id)}
        self._rank = rank
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
            parent = max(children, key=lambda c: (self._rank.get(c, 0), c))
            path.append(self.by_id[parent])
        return path
