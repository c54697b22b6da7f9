"""The step shape: positions, the attention mask drawn by hand, and the kept logit rows."""

from __future__ import annotations

import torch

from core.lookahead.step_shape import step_shape
from core.lookahead.tree import build_tree

MIN = torch.finfo(torch.float32).min


def _allowed(shape) -> list[str]:
    """The mask as rows of '1' (attend) and '.' (blocked), for comparing with a drawing."""
    return ["".join("1" if v == 0 else "." for v in row) for row in shape.mask_block.tolist()]


def test_w3_n3_two_levels_and_a_two_candidate_tree_match_the_hand_drawing() -> None:
    # W=3, N=3: level 0 = [x, a1, a2], level 1 = [b0, b1, b2]; candidates (N-1 = 2 tokens): (5, 6) and (5, 7).
    tree = build_tree([(5, 6), (5, 7)])
    assert tree.tokens == (5, 6, 7) and tree.parents == (-1, 0, 0)
    shape = step_shape(3, 2, tree.parents, torch.float32, torch.device("cpu"))
    #            x a1 a2 b0 b1 b2 c5 c6 c7
    assert _allowed(shape) == [
        "1........",  # x
        "11.......",  # a1: x, itself
        "111......",  # a2: x, a1, itself
        "1..1.....",  # b0 (column 0, level 1): x, itself
        "11..1....",  # b1: x, a1 (level 0 up to column 1), itself
        "111..1...",  # b2: x, a1, a2, itself
        "1.....1..",  # tree node 5: x, itself
        "1.....11.",  # tree node 6: x, 5, itself
        "1.....1.1",  # tree node 7: x, 5, itself (not its sibling 6)
    ]
    # positions: level-0 token i at p+i (x at p), level 1 column j at p+1+j, tree nodes at p+depth
    assert shape.position_offsets.tolist() == [0, 1, 2, 1, 2, 3, 1, 2, 2]
    # kept rows: x, the last level (the new Jacobi tokens), every tree node
    assert shape.keep_rows.tolist() == [0, 3, 4, 5, 6, 7, 8]
    assert (shape.tree_start, shape.tree_row, shape.size) == (6, 4, 9)
    assert shape.mask_block.dtype == torch.float32 and shape.mask_block.min().item() == MIN


def test_three_levels_see_their_whole_column() -> None:
    shape = step_shape(2, 3, (), torch.float32, torch.device("cpu"))
    #            x a1 b0 b1 c0 c1
    assert _allowed(shape) == [
        "1.....",
        "11....",
        "1.1...",
        "11.1..",
        "1.1.1.",  # level 2, column 0: x, level 1 column 0, itself
        "11.1.1",  # level 2, column 1: x, a1, b1, itself
    ]
    assert shape.position_offsets.tolist() == [0, 1, 1, 2, 2, 3]
    assert shape.keep_rows.tolist() == [0, 4, 5]


def test_verification_only_feeds_x_and_the_tree() -> None:
    tree = build_tree([(4, 5, 6), (4, 5, 9), (8, 1, 1)])
    assert tree.tokens == (4, 5, 6, 9, 8, 1, 1) and tree.parents == (-1, 0, 1, 1, -1, 4, 5)
    assert tree.paths == ((0, 1, 2), (0, 1, 3), (4, 5, 6))
    shape = step_shape(0, 0, tree.parents, torch.float32, torch.device("cpu"))
    assert _allowed(shape) == [
        "1.......",
        "11......",
        "111.....",
        "1111....",
        "111.1...",
        "1....1..",
        "1....11.",
        "1....111",
    ]
    assert shape.position_offsets.tolist() == [0, 1, 2, 3, 3, 1, 2, 3]
    assert shape.keep_rows.tolist() == list(range(8))
    assert (shape.tree_start, shape.tree_row) == (1, 1)


def test_layouts_are_built_once_per_shape() -> None:
    a = step_shape(3, 2, (-1, 0), torch.float32, torch.device("cpu"))
    b = step_shape(3, 2, (-1, 0), torch.float32, torch.device("cpu"))
    assert a is b
