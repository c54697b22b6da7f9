"""Greedy verification: the longest guessed prefix that matches the model's own argmax chain."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def verify_greedy(
    first: int, candidates: Sequence[Sequence[int]], next_token: Callable[[int, int], int]
) -> tuple[int, int, list[int]]:
    """Pick the candidate whose prefix the model confirms the furthest.

    Args:
        first: the model's (processed) argmax after x: the next token, always emitted.
        candidates: guessed continuations of x.
        next_token: ``next_token(c, m)`` is the model's argmax after candidate c's tokens 0..m;
            it is called only for the tokens that verification reaches.

    Returns:
        ``(best, accepted, emitted)``: the chosen candidate's index (-1 if none matched), how many
        of its tokens were accepted, and the tokens to emit: the accepted ones plus the model's
        token after them (1 to N tokens).
    """
    best, accepted, emitted = -1, 0, [first]
    for c, candidate in enumerate(candidates):
        target, k = first, 0
        while k < len(candidate) and candidate[k] == target:
            target = next_token(c, k)
            k += 1
        if k > accepted:
            best, accepted = c, k
            emitted = [*candidate[:k], target]
    return best, accepted, emitted
