"""The branch tree on its own: the active path, siblings, and damaged links."""

from __future__ import annotations

from dataclasses import dataclass

from core.chat.branches import Branches


@dataclass(frozen=True)
class M:
    id: int
    parent_id: int | None


def test_the_highest_ranked_children_make_the_path_and_the_newest_wins_a_tie() -> None:
    messages = [M(1, None), M(2, 1), M(3, 1), M(4, 3), M(5, 2), M(6, 5), M(7, 5)]
    assert [m.id for m in Branches(messages, {2: 9, 3: 8, 6: 2, 7: 1}).path] == [1, 2, 5, 6]
    assert [m.id for m in Branches(messages, {}).path] == [1, 3, 4]
    branches = Branches(reversed(messages), {2: 1})
    assert [m.id for m in branches.path] == [1, 2, 5, 7]
    assert branches.siblings(3) == [2, 3] and branches.position(7) == (1, 2) and branches.position(1) == (0, 1)


def test_messages_with_a_missing_or_later_parent_stay_reachable_as_first_messages() -> None:
    messages = [M(1, None), M(2, 1), M(3, 99), M(4, 4), M(5, 6), M(6, 5)]
    branches = Branches(messages, {1: 5, 2: 5})
    assert [m.id for m in branches.path] == [1, 2]
    assert branches.siblings(1) == [1, 3, 4, 5]  # 6 follows 5 (older), 5 cannot follow 6 (a loop)
    assert branches.siblings(6) == [6]
    assert [m.id for m in Branches([], {}).path] == []
