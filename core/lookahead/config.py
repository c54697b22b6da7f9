"""Lookahead decoding parameters, validated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LookaheadConfig:
    """Parameters of lookahead decoding (Fu et al., ICML 2024).

    Attributes:
        window: W, the number of Jacobi columns guessed in parallel; 0 for verification only (no
            lookahead branch: candidates come from the prompt, the answer so far and the conversation).
        ngram: N, the n-gram size; a step emits at most N tokens.
        guesses: G, the most n-gram candidates verified per step (and kept per pool key).
        pool_from_prompt: seed the n-gram pool with the prompt's own n-grams.
        pool_from_output: add the answer's own n-grams to the pool as they are emitted (with both
            pool options off, candidates come from the Jacobi window alone).
        seed: seeds the random prompt tokens that fill the initial window.
        cut_to_match: cut each candidate to as many tokens as the context that found it (a guess found
            after only the last token proposes one token; after the last three tokens, up to three): fewer
            tokens fed for guesses that seldom hold, which pays where each token fed costs (a CPU).
    """

    window: int = 7
    ngram: int = 5
    guesses: int = 7
    pool_from_prompt: bool = True
    seed: int = 0
    pool_from_output: bool = True
    cut_to_match: bool = False

    def __post_init__(self) -> None:
        if self.window < 0:
            raise ValueError(f"Lookahead window W must be 0 (verification only) or more (got {self.window}).")
        if self.window == 0 and self.guesses < 1:
            raise ValueError("Verification only (W=0) needs at least one guess: G must be 1 or more.")
        if self.ngram < 2:
            raise ValueError(f"Lookahead n-gram size N must be at least 2 (got {self.ngram}).")
        if self.guesses < 0:
            raise ValueError(f"Lookahead guesses G must be 0 or more (got {self.guesses}).")
        if self.window * (self.ngram - 1) + self.guesses * (self.ngram - 1) > 4096:
            raise ValueError("Lookahead step too large: W*(N-1) + G*(N-1) must stay at most 4096 tokens.")

    @property
    def label(self) -> str:
        return f"W{self.window} N{self.ngram} G{self.guesses}{' cut' if self.cut_to_match else ''}"

    @classmethod
    def from_label(cls, label: str) -> LookaheadConfig:
        """The setting a :attr:`label` names (``W0 N3 G1`` or ``W0 N3 G1 cut``)."""
        parts = label.split()
        cut = parts[3:] == ["cut"]
        if len(parts) != (4 if cut else 3) or [p[:1] for p in parts[:3]] != ["W", "N", "G"]:
            raise ValueError(f"not a lookahead setting: {label!r}")
        window, ngram, guesses = (int(p[1:]) for p in parts[:3])
        return cls(window, ngram, guesses, cut_to_match=cut)

    @property
    def max_step_tokens(self) -> int:
        """The most tokens one step feeds: x, the lookahead levels and G candidates of N-1 tokens."""
        return max(1, self.window * (self.ngram - 1)) + self.guesses * (self.ngram - 1)
