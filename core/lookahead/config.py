"""Lookahead decoding parameters, validated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LookaheadConfig:
    """Parameters of lookahead decoding (Fu et al., ICML 2024).

    Attributes:
        window: W, the number of Jacobi columns guessed in parallel.
        ngram: N, the n-gram size; a step emits at most N tokens.
        guesses: G, the most n-gram candidates verified per step (and kept per pool key).
        pool_from_prompt: seed the n-gram pool with the prompt's own n-grams.
        seed: seeds the random prompt tokens that fill the initial window.
    """

    window: int = 7
    ngram: int = 5
    guesses: int = 7
    pool_from_prompt: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"Lookahead window W must be at least 1 (got {self.window}).")
        if self.ngram < 2:
            raise ValueError(f"Lookahead n-gram size N must be at least 2 (got {self.ngram}).")
        if self.guesses < 0:
            raise ValueError(f"Lookahead guesses G must be 0 or more (got {self.guesses}).")
        if self.window * (self.ngram - 1) + self.guesses * (self.ngram - 1) > 4096:
            raise ValueError("Lookahead step too large: W*(N-1) + G*(N-1) must stay at most 4096 tokens.")

    @property
    def label(self) -> str:
        return f"W{self.window} N{self.ngram} G{self.guesses}"
