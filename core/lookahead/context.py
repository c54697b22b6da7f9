"""Prompt lookup: where the text's last few tokens occurred before, and what followed them there.

A guess found after the longest matching context is the likeliest to be right: after "def add(a, b):"
the tokens that followed "(a, b):" earlier beat the newest n-gram that merely starts with ":". The
length of the match also says how far to trust the guess (:attr:`LookaheadConfig.cut_to_match`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_CONTEXT = 4
"""The longest context looked up: longer ones add almost nothing to the guesses' acceptance."""


class ContextIndex:
    """The latest occurrence of every context of 1..``max_context`` tokens in a growing token sequence.

    ``extend`` appends tokens; ``record=False`` appends them as context only (their occurrences are
    not offered as guesses: a prompt the pool options keep out).
    """

    def __init__(self, max_context: int = MAX_CONTEXT) -> None:
        self.max_context = max_context
        self.tokens: list[int] = []
        self._follower: dict[tuple[int, ...], int] = {}  # context -> index of the token after its latest occurrence
        self._found: tuple[int, int, int] = (-1, 0, 0)  # (sequence length, matched, start): one search a step

    def extend(self, tokens: Iterable[int], *, record: bool = True) -> None:
        """Append ``tokens``; each becomes the follower of the contexts ending just before it."""
        seq = self.tokens
        for token in tokens:
            end = len(seq)
            if record:
                for k in range(1, min(self.max_context, end) + 1):
                    self._follower[tuple(seq[end - k : end])] = end
            seq.append(token)

    def continuation(self, limit: int) -> tuple[int, tuple[int, ...]]:
        """``(matched, tokens)``: up to ``limit`` tokens that followed the latest earlier occurrence of the
        longest context ending the sequence, and that context's length; ``(0, ())`` where none occurred."""
        seq = self.tokens
        length, matched, start = self._found
        if length != len(seq):
            matched, start = self.latest(seq)
            self._found = (len(seq), matched, start)
        return (matched, tuple(seq[start : start + limit])) if matched else (0, ())

    def latest(self, text: Sequence[int]) -> tuple[int, int]:
        """``(matched, start)``: the length of the longest context ending ``text`` that occurred in this
        sequence, and where the token after its latest occurrence lies; ``(0, 0)`` where none did."""
        for k in range(min(self.max_context, len(text)), 0, -1):
            found = self._follower.get(tuple(text[len(text) - k :]))
            if found is not None:
                return k, found
        return 0, 0
