"""The candidate tree, the n-gram pool and greedy verification, on scripted tokens."""

from __future__ import annotations

import pytest
import torch

from core.lookahead.pool import NGramPool
from core.lookahead.tree import build_tree
from core.lookahead.verify import verify_greedy
from core.runtime.step import argmax


def test_tree_merges_shared_prefixes_and_keeps_each_candidates_path() -> None:
    tree = build_tree([(1, 2, 3), (1, 2, 4), (1, 5, 3), (6, 2, 3)])
    assert tree.size == 9  # 12 candidate tokens: 1 is fed once for three candidates, (1, 2) once for two
    for candidate, path in zip([(1, 2, 3), (1, 2, 4), (1, 5, 3), (6, 2, 3)], tree.paths):
        assert [tree.tokens[n] for n in path] == list(candidate)
        assert all(tree.parents[path[i]] == (path[i - 1] if i else -1) for i in range(len(path)))
    assert build_tree([]).size == 0


def test_pool_keeps_the_newest_per_key_and_refreshes_repeats() -> None:
    pool = NGramPool(ngram=3, per_key=2)
    pool.add([1, 2, 3])
    pool.add([1, 4, 5])
    pool.add([1, 2, 3])  # refreshed: now the newest
    pool.add([1, 6, 7])  # evicts the least recently seen: (4, 5)
    assert pool.candidates(1, 5) == [(6, 7), (2, 3)]
    assert pool.candidates(9, 5) == [] and pool.candidates(1, 0) == []


def test_pool_cuts_continuations_for_a_smaller_n_and_merges_what_coincides() -> None:
    pool = NGramPool(ngram=4, per_key=4)
    pool.add_sequence([1, 2, 3, 4, 1, 2, 3, 9, 1, 5, 6, 7])
    assert pool.candidates(1, 4) == [(5, 6, 7), (2, 3, 9), (2, 3, 4)]
    assert pool.candidates(1, 4, length=2) == [(5, 6), (2, 3)]
    assert pool.candidates(1, 1, length=2) == [(5, 6)]


def test_pool_forgets_the_oldest_key_beyond_its_size() -> None:
    pool = NGramPool(ngram=2, per_key=1, max_keys=2)
    pool.add([1, 2])
    pool.add([3, 4])
    pool.add([5, 6])
    assert pool.candidates(1, 1) == [] and pool.candidates(5, 1) == [(6,)]
    assert 1 not in pool and 3 in pool and 5 in pool


def _chain(table: dict[tuple[int, ...], int], candidates):
    """next_token(c, m) from a table prefix -> the model's argmax after it."""
    return lambda c, m: table[tuple(candidates[c][: m + 1])]


def test_verify_with_no_candidates_emits_the_next_token() -> None:
    assert verify_greedy(7, [], lambda c, m: 0) == (-1, 0, [7])


def test_verify_accepts_the_longest_matching_prefix_and_the_bonus_token() -> None:
    candidates = [(7, 8, 1), (7, 8, 9), (3, 3, 3)]
    table = {(7,): 8, (7, 8): 9, (7, 8, 9): 4, (3,): 0}
    best, accepted, emitted = verify_greedy(7, candidates, _chain(table, candidates))
    assert (best, accepted, emitted) == (1, 3, [7, 8, 9, 4])  # all N-1 accepted plus the model's next token


def test_verify_with_one_partial_match() -> None:
    candidates = [(5, 6, 7)]
    table = {(5,): 6, (5, 6): 2}
    assert verify_greedy(5, candidates, _chain(table, candidates)) == (0, 2, [5, 6, 2])


def test_verify_with_no_match_emits_only_the_models_token() -> None:
    candidates = [(1, 2), (3, 4)]
    assert verify_greedy(9, candidates, lambda c, m: 0) == (-1, 0, [9])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_takes_the_first_maximum_as_torch_argmax_does(dtype: torch.dtype) -> None:
    nan, inf = float("nan"), float("inf")
    rows = torch.tensor(
        [[1.0, 3.0, 3.0, 0.0], [nan, 1.0, nan, 2.0], [-inf, -inf, -inf, -inf], [2.0, inf, inf, 1.0]], dtype=dtype
    )
    assert torch.equal(argmax(rows), rows.argmax(-1))
    ties = torch.randint(0, 4, (64, 49152), generator=torch.Generator().manual_seed(0)).to(dtype)  # the maximum repeats
    assert torch.equal(argmax(ties), ties.argmax(-1)) and torch.equal(argmax(ties[0]), ties[0].argmax())
