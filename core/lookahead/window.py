"""The Jacobi window: W columns of N-1 levels of guessed tokens, updated after every step."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from core.lookahead.pool import NGramPool


class JacobiWindow:
    """Level rows of guesses; level 0 has W-1 tokens (x completes it), levels 1.. have W.

    Starts with level 0 only (random prompt tokens) and grows one level per step until it has
    N-1 levels; from then on every step yields W n-grams and shifts the levels up by one.
    """

    def __init__(self, window: int, ngram: int, prompt: Sequence[int], eos_ids: Collection[int], seed: int) -> None:
        self.window = window
        self.ngram = ngram
        self._eos = set(eos_ids)
        self._rng = random.Random(seed)
        self._fill_tokens = [t for t in prompt if t not in self._eos] or [0]
        self.levels: list[list[int]] = [self._random_tokens(window - 1)]

    @property
    def full(self) -> bool:
        return len(self.levels) == self.ngram - 1

    def rows(self, x: int) -> list[int]:
        """The step's lookahead tokens, level by level, with x as column 0 of level 0."""
        flat = [x, *self.levels[0]]
        for level in self.levels[1:]:
            flat.extend(level)
        return flat

    def update(self, x: int, new_row: list[int], pool: NGramPool) -> None:
        """Take the step's new Jacobi tokens: harvest n-grams (when full), then shift or grow."""
        new_row = [t if t not in self._eos else self._rng.choice(self._fill_tokens) for t in new_row]
        if not self.full:
            self.levels.append(new_row)
            return
        columns = [[x, *self.levels[0]], *self.levels[1:], new_row]
        for j in range(self.window):
            pool.add([row[j] for row in columns])
        if self.ngram == 2:
            self.levels = [new_row[1:]]
        else:
            self.levels = [self.levels[1][1:], *self.levels[2:], new_row]

    def _random_tokens(self, count: int) -> list[int]:
        return [self._rng.choice(self._fill_tokens) for _ in range(count)]
