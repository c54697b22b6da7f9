"""The model's earlier answers as a source of guesses: what followed the same few tokens in another answer.

A model repeats its own phrasing across conversations (the same boilerplate around code, the same ways of
starting a step of a solution), which prompt lookup cannot see: it searches only the text of the answer
in progress. The memory is consulted where its context is at least :data:`MIN_CONTEXT` tokens and longer than
the one the text itself matched (a short match in another answer is a weak guess, and each token fed costs on
a CPU), and for a single token on any context where the text offers no guess at all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from core.lookahead.context import ContextIndex

MIN_CONTEXT = 3
"""The shortest context the memory answers for (2 guessed worse than the text's own matches)."""

MAX_TOKENS = 100_000
"""Tokens of answers kept (a few hundred answers; each token indexes up to four contexts)."""

_END = -1  # between two answers: no context runs across it, no guess past it


class AnswerMemory:
    """The newest answers of one model (its tokenizer's ids), at most ``max_tokens`` of them.

    Its owner adds each answer once it ends (:meth:`add`); a decoding only reads it, so runs that must see
    the same memory (the bench's methods on one prompt) can share it.
    """

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        if max_tokens < 1:
            raise ValueError(f"An answer memory must keep at least one token (got {max_tokens}).")
        self.max_tokens = max_tokens
        self._answers: deque[tuple[int, ...]] = deque()
        self._tokens = 0
        self._index = ContextIndex()

    def __len__(self) -> int:
        """Tokens kept."""
        return self._tokens

    def add(self, answer: Sequence[int]) -> None:
        """Remember ``answer``; the oldest answers go once more than ``max_tokens`` are kept (never the newest)."""
        answer = tuple(answer[-self.max_tokens :])
        if not answer:
            return
        self._answers.append(answer)
        self._tokens += len(answer)
        if self._tokens <= self.max_tokens:
            self._index_answer(answer)
            return
        while len(self._answers) > 1 and self._tokens > self.max_tokens * 3 // 4:  # in bulk: the index is rebuilt
            self._tokens -= len(self._answers.popleft())
        self._index = ContextIndex()
        for kept in self._answers:
            self._index_answer(kept)

    def _index_answer(self, answer: tuple[int, ...]) -> None:
        self._index.extend(answer)
        self._index.extend([_END], record=False)

    def continuation(
        self, text: Sequence[int], limit: int, *, shortest: int = MIN_CONTEXT
    ) -> tuple[int, tuple[int, ...]]:
        """``(matched, tokens)``: up to ``limit`` tokens that followed, in an earlier answer, the longest context
        (of ``shortest`` tokens or more) that ends ``text``; ``(0, ())`` where none did."""
        matched, start = self._index.latest(text)
        if matched < max(1, shortest):
            return 0, ()
        tokens = self._index.tokens[start : start + limit]
        if _END in tokens:
            tokens = tokens[: tokens.index(_END)]
        return (matched, tuple(tokens)) if tokens else (0, ())
