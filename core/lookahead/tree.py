"""Candidate n-grams merged into a token tree, so that a shared prefix is fed to the model once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CandidateTree:
    """The verification branch of a step.

    Attributes:
        tokens: one token per tree node, in feeding order (a parent always before its children).
        parents: each node's parent node, or -1 for a child of x (the last accepted token).
        paths: ``paths[c][m]`` is the node of candidate c's token m.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    paths: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return len(self.tokens)


def build_tree(candidates: Sequence[Sequence[int]]) -> CandidateTree:
    """Merge candidates that share a prefix: each distinct prefix becomes one node."""
    tokens: list[int] = []
    parents: list[int] = []
    node_of: dict[tuple[int, int], int] = {}
    paths: list[tuple[int, ...]] = []
    for candidate in candidates:
        parent, path = -1, []
        for token in candidate:
            node = node_of.get((parent, token))
            if node is None:
                node = node_of[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
            path.append(node)
            parent = node
        paths.append(tuple(path))
    return CandidateTree(tuple(tokens), tuple(parents), tuple(paths))
