"""The n-gram pool: candidate continuations keyed by their first token, LRU per key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


class NGramPool:
    """Stores n-grams as ``first token -> continuations``, at most ``per_key`` per key (LRU).

    Lookup returns the most recently seen continuations first.
    """

    def __init__(self, ngram: int, per_key: int, max_keys: int = 200_000) -> None:
        self.ngram = ngram
        self.per_key = per_key
        self.max_keys = max_keys
        self._pool: OrderedDict[int, OrderedDict[tuple[int, ...], None]] = OrderedDict()

    def __len__(self) -> int:
        """Keys stored."""
        return len(self._pool)

    def __contains__(self, key: object) -> bool:
        """Whether any n-gram starting with ``key`` is stored."""
        return key in self._pool

    def add(self, gram: Sequence[int]) -> None:
        """Insert one n-gram (length ``ngram``), refreshing it if already present."""
        if self.per_key == 0:
            return
        key, continuation = gram[0], tuple(gram[1:])
        entries = self._pool.get(key)
        if entries is None:
            entries = self._pool[key] = OrderedDict()
            if len(self._pool) > self.max_keys:
                self._pool.popitem(last=False)
        else:
            self._pool.move_to_end(key)
        if continuation in entries:
            entries.move_to_end(continuation)
            return
        entries[continuation] = None
        if len(entries) > self.per_key:
            entries.popitem(last=False)

    def add_sequence(self, tokens: Iterable[int]) -> None:
        """Insert every n-gram of a token sequence (e.g. a prompt or a finished answer)."""
        seq = list(tokens)
        for i in range(len(seq) - self.ngram + 1):
            self.add(seq[i : i + self.ngram])

    def candidates(self, key: int, limit: int, length: int | None = None) -> list[tuple[int, ...]]:
        """Up to ``limit`` distinct continuations stored under ``key``, newest first.

        ``length`` cuts each continuation to its first ``length`` tokens (a setting with a smaller N
        than the pool's); cut continuations that coincide count once.
        """
        entries = self._pool.get(key)
        if not entries or limit <= 0:
            return []
        found: dict[tuple[int, ...], None] = {}
        for continuation in reversed(entries):
            found[continuation[:length] if length is not None else continuation] = None
            if len(found) == limit:
                break
        return list(found)
