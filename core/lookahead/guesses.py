"""A step's guesses: one lookup of the text, the memory and the pool, shaped for each setting.

Every verification setting draws its candidates from the same three sources, and a longer or more
numerous setting's candidates only extend a shorter one's. So the decoder looks them up once a step at
the largest N and G, and each setting (the one that runs and every one Auto scores in the shadow) takes
its candidates from that: one lookup a step however many settings are scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Guesses:
    """What could follow x, the text's last token, as looked up once.

    ``follower``: what followed the longest earlier context of the text's last tokens (in the text, or in an
    earlier answer where that context is longer, or one token of an earlier answer's where the text has none),
    ``matched`` tokens of context long; ``pooled``: the pool's continuations under x, newest first, at full
    length.
    """

    matched: int
    follower: tuple[int, ...]
    pooled: tuple[tuple[int, ...], ...]

    def candidates(self, ngram: int, guesses: int, cut: bool) -> list[tuple[int, ...]]:
        """Up to ``guesses`` continuations of at most ``ngram - 1`` tokens: the follower first, then the pool's,
        newest first. ``cut``: each only as long as the context that found it (the pool's: one token)."""
        found: dict[tuple[int, ...], None] = {}
        if self.follower and guesses:
            follower = self.follower[: ngram - 1]
            found[follower[: self.matched] if cut else follower] = None
        if len(found) < guesses and self.pooled:
            for candidate in _distinct(self.pooled, guesses, ngram - 1):
                candidate = candidate[:1] if cut else candidate
                if not any(f[: len(candidate)] == candidate for f in found):  # a prefix adds nothing to verify
                    found[candidate] = None
                if len(found) == guesses:
                    break
        return list(found)


def _distinct(pooled: Sequence[tuple[int, ...]], limit: int, length: int) -> list[tuple[int, ...]]:
    """The first ``limit`` distinct continuations once each is cut to ``length`` tokens (as the pool gives them
    to a setting with a smaller N than its own)."""
    found: dict[tuple[int, ...], None] = {}
    for continuation in pooled:
        found[continuation[:length]] = None
        if len(found) == limit:
            break
    return list(found)


def tree_size(candidates: Sequence[tuple[int, ...]]) -> int:
    """The nodes of the candidates' token tree (:func:`~core.lookahead.tree.build_tree`): their distinct prefixes."""
    return len({c[:end] for c in candidates for end in range(1, len(c) + 1)})


def common_prefix(candidate: Sequence[int], tokens: Sequence[int]) -> int:
    """How many of ``candidate``'s first tokens ``tokens`` begins with."""
    n = 0
    for a, b in zip(candidate, tokens):
        if a != b:
            break
        n += 1
    return n
