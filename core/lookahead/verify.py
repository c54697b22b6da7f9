"""Greedy verification: the longest guessed prefix that matches the model's own argmax chain."""

from __future__ import annotations

from collections.abc import Sequence


def verify_greedy(
    first: int, candidates: Sequence[Sequence[int]], predictions: Sequence[Sequence[int]]
) -> tuple[int, int, list[int]]:
    """Pick the candidate whose prefix the model confirms the furthest.

    Args:
        first: the model's argmax after x (the next token, always emitted).
        candidates: guessed continuations of x, each N-1 tokens.
        predictions: ``predictions[c][m]`` is the argmax after candidate c's token m.

    Returns:
        ``(best, accepted, emitted)``: the chosen candidate's index (-1 if none matched), how many
        of its tokens were accepted, and the tokens to emit: the accepted ones plus the model's
        token after them (1 to N tokens).
    """
    best, accepted, emitted = -1, 0, [first]
    for c, candidate in enumerate(candidates):
        target, k = first, 0
        chain = predictions[c]
        while k < len(candidate) and candidate[k] == target:
            target = chain[k]
            k += 1
        if k > accepted:
            best, accepted = c, k
            emitted = [*candidate[:k], target]
    return best, accepted, emitted
