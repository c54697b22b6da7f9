"""The Jacobi window: start-up, shift, n-gram harvest and EOS replacement, on a scripted sequence."""

from __future__ import annotations

from core.lookahead.pool import NGramPool
from core.lookahead.window import JacobiWindow


def level0_distinct(window: JacobiWindow) -> bool:
    """The scripted checks below key the pool by level-0 tokens, so they must differ."""
    return len(set(window.levels[0])) == len(window.levels[0])


def test_window_grows_then_shifts_and_harvests_one_ngram_per_column() -> None:
    window = JacobiWindow(window=3, ngram=4, prompt=list(range(50, 90)), eos_ids=[], seed=0)
    assert len(window.levels) == 1 and len(window.levels[0]) == 2
    assert all(50 <= t < 90 for t in window.levels[0]) and level0_distinct(window)  # level 0 starts from prompt tokens
    level0 = list(window.levels[0])
    pool = NGramPool(ngram=4, per_key=8)
    window.update(10, [11, 12, 13], pool)  # start-up: a new level, nothing harvested yet
    assert window.levels == [level0, [11, 12, 13]] and not window.full
    window.update(20, [21, 22, 23], pool)
    assert window.levels == [level0, [11, 12, 13], [21, 22, 23]] and window.full
    assert pool.candidates(20, 8) == []
    assert window.rows(30) == [30, *level0, 11, 12, 13, 21, 22, 23]
    window.update(30, [31, 32, 33], pool)
    # columns: (x or level 0, level 1, level 2, new token)
    assert pool.candidates(30, 8) == [(11, 21, 31)]
    assert pool.candidates(level0[0], 8) == [(12, 22, 32)]
    assert pool.candidates(level0[1], 8) == [(13, 23, 33)]
    # shift: level 1 drops its first token and becomes level 0; the new tokens become the last level
    assert window.levels == [[12, 13], [21, 22, 23], [31, 32, 33]]


def test_eos_in_new_jacobi_tokens_is_replaced_by_prompt_tokens() -> None:
    window = JacobiWindow(window=2, ngram=3, prompt=[5, 2, 6], eos_ids=[2], seed=1)
    window.update(9, [2, 2], NGramPool(3, 4))
    assert all(t in (5, 6) for t in window.levels[1])


def test_ngram_two_keeps_one_level() -> None:
    window = JacobiWindow(window=3, ngram=2, prompt=list(range(40, 80)), eos_ids=[], seed=0)
    pool = NGramPool(ngram=2, per_key=4)
    level0 = list(window.levels[0])
    window.update(7, [8, 9, 10], pool)
    assert pool.candidates(7, 4) == [(8,)] and pool.candidates(level0[0], 4) == [(9,)]
    assert window.levels == [[9, 10]]
