"""Prompt lookup: the longest earlier context and what followed it."""

from __future__ import annotations

from core.lookahead.context import ContextIndex


def test_the_longest_context_wins_and_its_latest_occurrence() -> None:
    index = ContextIndex(max_context=3)
    index.extend([1, 2, 3, 4, 5, 2, 3, 6, 7, 9, 3, 8, 1, 2, 3])
    # (1, 2, 3) occurred once, followed by 4 5; the shorter (2, 3) later, followed by 6 7
    assert index.continuation(2) == (3, (4, 5))
    index.extend([6])
    # (2, 3, 6) occurred before: its follower 7 9 3 ...; a limit cuts it
    assert index.continuation(5) == (3, (7, 9, 3, 8, 1))
    index.extend([0])
    assert index.continuation(3) == (0, ())  # 0 never occurred before


def test_one_token_contexts_take_the_newest_follower_and_may_run_into_the_end() -> None:
    index = ContextIndex()
    index.extend([5, 6, 5, 7, 5])
    assert index.continuation(3) == (1, (7, 5))  # after the latest earlier 5: 7, then the sequence ends
    index.extend([5])
    assert index.continuation(3) == (1, (5,))  # "5 5" never occurred, "5" last followed by the 5 just added


def test_tokens_added_as_context_only_are_not_offered() -> None:
    index = ContextIndex()
    index.extend([1, 2, 3, 4], record=False)
    index.extend([1, 2])
    assert index.continuation(2) == (0, ())  # 1 2 3 4 was context only
    index.extend([9, 1, 2])
    assert index.continuation(2) == (2, (9, 1))  # 1 2 followed by 9 in the recorded part
