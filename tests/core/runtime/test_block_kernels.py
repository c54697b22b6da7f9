"""The int8 decoder on a GGUF model's weights as stored (Q4_K, Q6_K, Q5_0, Q8_0): the model's own products on
block-rounded activations, every row of a step the bits of its 1-token step, and so greedy lookahead equal
to greedy plain in these precisions too."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from core.lookahead import Decoding, LookaheadConfig
from core.models import LoadOptions, ModelSource, load_model
from core.models.gguf_model import load_gguf_model
from core.paths import AppPaths
from core.runtime.compiled import kernels
from core.runtime.compiled.int8_decoder import Int8Decoder, why_not_int8_decoder
from core.runtime.compiled.step import CompiledStep
from core.runtime.prepared import PreparedModel
from core.runtime.weights.blocks import (
    BLOCK_FORMATS,
    INTERLEAVED_FORMATS,
    BlockLinear,
    as_stored,
    dequantize,
    interleave,
    stored_format,
)
from core.runtime.weights.quantized import Int8WeightLinear
from tests.core.models.tiny_gguf import (
    MIXED_TYPES,
    DequantizedLinear,
    dequantized,
    random_blocks,
    write_tiny_quantized_gguf,
)
from tests.core.runtime.test_kernels import Step, expected_levels, tree_mask

pytestmark = pytest.mark.skipif(not kernels.supported(), reason="the kernels need an x86-64 processor with AVX2")

Q = gguf.GGMLQuantizationType
ONE_TYPE = {name: Q.Q8_0 if name == "token_embd" else None for name in MIXED_TYPES}


@pytest.fixture(scope="module", autouse=True)
def kernel() -> None:
    kernels.load()


def gguf_model(
    tmp_path: Path, weights: Q | None = None, seed: int = 0, float_tensors: tuple[str, ...] = (), layers: int = 2
):
    """The tiny GGUF model with every weight of type ``weights`` (the embedding Q8_0), or mixed types."""
    types = None if weights is None else {name: kind or weights for name, kind in ONE_TYPE.items()}
    path = tmp_path / f"tiny-{seed}.gguf"
    write_tiny_quantized_gguf(path, seed=seed, types=types, float_tensors=float_tensors, layers=layers)
    built = load_gguf_model(path, tmp_path / "cache")
    built.interleave_weights()  # as the loader does once the kernels are built
    assert why_not_int8_decoder(built.model) is None
    return built.model


@contextlib.contextmanager
def block_rounded_activations(model: torch.nn.Module) -> Iterator[None]:
    """The eager model (``dequantized``: gguf's own dequantization) with each product's inputs rounded as the
    kernel promises: in blocks of the weight format's block (32 or 256 inputs), each to integers at amax / 127
    (the division in fp32), nearest even; per row at the int8 kernel's levels for int8 weights."""

    def round_blocks(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        x = args[0]
        if isinstance(module, Int8WeightLinear):
            levels, block = expected_levels(x.shape[-1]), x.shape[-1]
        else:
            levels, block = 127, BLOCK_FORMATS[stored_format(module.format_id)][1]
        blocks = x.reshape(*x.shape[:-1], -1, block)
        amax = blocks.abs().amax(-1, keepdim=True)
        inverse = torch.where(amax > 0, torch.full_like(amax, levels) / amax, 0)
        return ((torch.round(blocks * inverse) * (amax / levels)).reshape(x.shape),)

    products = (DequantizedLinear, Int8WeightLinear)
    hooks = [m.register_forward_pre_hook(round_blocks) for m in model.modules() if isinstance(m, products)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize(
    "weights", [Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0, None], ids=["Q4_K", "Q6_K", "Q5_0", "Q8_0", "mixed"]
)
def test_the_decoder_computes_the_gguf_model_on_block_rounded_activations(tmp_path: Path, weights: Q | None) -> None:
    """Each format's products (nibbles, high bits, sub-block scales and minimums) on the file's own blocks:
    the eager model's logits (gguf's dequantization), its inputs rounded as the kernel's, to fp32's rounding.
    One layer: where a sum in another order rounds one activation to the next of its 127 levels, a second layer
    of random weights spreads that to a percent of the row's logits (measured)."""
    model = gguf_model(tmp_path, weights, layers=1)
    ids = torch.randint(3, 260, (21,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), block_rounded_activations(reference := dequantized(model)):
        expected = reference(ids[None]).logits[0]
    with torch.no_grad():
        logits = Step(model)(ids, torch.arange(21), 0)
    assert_rows_agree(logits, expected)


def assert_rows_agree(logits: torch.Tensor, expected: torch.Tensor) -> None:
    """Most rows to fp32's rounding; a row where a sum in another order rounded one activation to the next of
    its 127 levels (measured: one row in 21, 2e-3 of its largest logit) within a level's reach. A fault in a
    format's products (a scale, a nibble, a minimum) moves every row."""
    error = (logits - expected).abs().amax(-1) / expected.abs().amax(-1)
    assert (error < 1e-5).float().mean() >= 0.8, error
    assert (error < 1e-2).all(), error


def test_a_weight_kept_as_int8_beside_the_blocks_is_computed_too(tmp_path: Path) -> None:
    model = gguf_model(tmp_path, float_tensors=("blk.0.ffn_down", "blk.0.attn_q"), layers=1)
    ids = torch.randint(3, 260, (9,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), block_rounded_activations(reference := dequantized(model)):
        expected = reference(ids[None]).logits[0]
    with torch.no_grad():
        logits = Step(model)(ids, torch.arange(9), 0)
    assert_rows_agree(logits, expected)


def test_the_models_own_forward_runs_the_kernels_products(tmp_path: Path) -> None:
    """``BlockLinear.forward`` (what ``generate`` runs) multiplies as the decoder does, never through fp32
    weights: each row of a call the bits of that row alone, the decoder's logits to fp32's rounding."""
    model = gguf_model(tmp_path, layers=1)
    ids = torch.randint(3, 260, (13,), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        eager = model(ids[None]).logits[0]
        logits = Step(model)(ids, torch.arange(13), 0)
        assert_rows_agree(eager, logits)
        for module in (m for m in model.modules() if isinstance(m, BlockLinear)):
            x = torch.randn(5, module.in_features, generator=torch.Generator().manual_seed(module.out_features))
            together = module(x)
            assert all(torch.equal(module(x[i : i + 1])[0], together[i]) for i in range(5)), module.format_name


@pytest.mark.parametrize("kind", [Q.Q4_K, Q.Q6_K, Q.Q5_0, Q.Q8_0], ids=["Q4_K", "Q6_K", "Q5_0", "Q8_0"])
def test_an_interleaved_weight_gives_the_as_stored_products_bit_for_bit(kind: Q) -> None:
    """The layout made at load (8 rows a group, the scales unpacked) holds the file's blocks byte for byte, and
    its products are the as-stored kernel's to the bit, for any number of rows, each row the bits of that row
    alone: a model interleaved keeps every row of a step equal to its 1-token step. With AMX, steps of 2 rows
    or more take tiles for pairs of groups (16 rows at a time, the third group on vpdpbusd): the same bits."""
    rng = np.random.default_rng(int(kind))
    stored = torch.from_numpy(random_blocks(24, 768, kind, rng))
    groups, format_id = interleave(stored, int(kind))
    assert format_id == INTERLEAVED_FORMATS[kind] and groups.shape[0] == 3
    assert np.array_equal(as_stored(groups.numpy(), format_id), stored.numpy())
    assert torch.equal(dequantize(groups, format_id), dequantize(stored, int(kind)))
    x = torch.randn(33, 768, generator=torch.Generator().manual_seed(1))
    x[2, 256:512] = 0  # a block of zeros: its scale 0
    bias = torch.randn(24, generator=torch.Generator().manual_seed(2))
    linear = torch.ops.lookahead.block_linear
    for rows in (*range(1, 7), 16, 17, 33):  # tiles of 16 rows: full, one row past, two and a row
        as_stored_rows = linear(x[:rows], stored, int(kind), bias)
        together = linear(x[:rows], groups, format_id, bias)
        assert torch.equal(together, as_stored_rows), rows
        assert all(torch.equal(linear(x[r : r + 1], groups, format_id, bias)[0], together[r]) for r in range(rows))


def test_the_loader_interleaves_the_weights_of_whole_groups(tmp_path: Path) -> None:
    """The loader reads the file as stored while the kernels build, then lays out each weight of
    whole groups of 8 rows interleaved (the tiny model's head, of 260 rows, stays as stored), and the decoder
    reads both."""
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path, seed=0)
    paths = AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache").ensure()
    loaded = load_model(ModelSource("gguf", str(path)), LoadOptions(device="cpu"), paths)
    assert loaded.weights_as_stored
    linears = [m for m in loaded.model.modules() if isinstance(m, BlockLinear)]
    interleaved = {m.format_id for m in linears if m.format_id in INTERLEAVED_FORMATS.values()}
    assert interleaved == set(INTERLEAVED_FORMATS.values())
    assert loaded.model.lm_head.format_id == Q.Q6_K and loaded.model.lm_head.out_features % 8
    assert {m.format_name for m in linears} == {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}  # the file's names
    assert set(loaded.quantization.split("/")) == {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}


@pytest.mark.parametrize("rows", [3, 8, 17])
def test_a_token_gets_the_logits_of_its_own_1_token_step(tmp_path: Path, rows: int) -> None:
    """Every row of a step under a tree mask: the bits of a 1-token step over the entries it sees (the blocks
    decoded once for up to four rows, the rows beside it change nothing), over the bf16 cache GGUF models use."""
    model = gguf_model(tmp_path, seed=rows)
    generator = torch.Generator().manual_seed(rows)
    past = 30
    step = Step(model, torch.bfloat16)
    with torch.no_grad():
        step(torch.randint(3, 260, (past,), generator=generator), torch.arange(past), 0, rows=torch.arange(0))
        ids = torch.randint(3, 260, (rows,), generator=generator)
        positions = past + torch.randint(0, rows, (rows,), generator=generator)
        mask = tree_mask(rows, generator)
        together = step(ids, positions, past, mask)
        for row in range(rows):
            seen = torch.cat([torch.arange(past), past + (mask[row] == 0).nonzero()[:-1, 0]])
            alone = Step(model, torch.bfloat16)
            for mine, whole in zip(alone.keys + alone.values, step.keys + step.values):
                mine[: len(seen)] = whole[seen]
            assert torch.equal(alone(ids[row : row + 1], positions[row : row + 1], len(seen))[0], together[row]), row


CONFIGS = [
    LookaheadConfig(window=7, ngram=5, guesses=7),
    LookaheadConfig(window=4, ngram=3, guesses=4, pool_from_prompt=False),
    LookaheadConfig(window=0, ngram=4, guesses=3),
]


@pytest.mark.parametrize("weights", [Q.Q4_K, None], ids=["Q4_K", "mixed"])
def test_greedy_lookahead_equals_greedy_plain_on_the_blocks(tmp_path: Path, weights: Q | None) -> None:
    model = gguf_model(tmp_path, weights, seed=5)
    prepared = PreparedModel(model, CompiledStep(None, None, Int8Decoder.of(model)))
    head = torch.randint(3, 260, (20,), generator=torch.Generator().manual_seed(5)).tolist()
    prompt = head + head
    plain = Decoding(prepared, prompt, max_new_tokens=48)
    list(plain)
    assert len(plain.tokens) == 48
    for config in CONFIGS:
        look = Decoding(prepared, prompt, lookahead=config, max_new_tokens=48)
        list(look)
        assert look.tokens == plain.tokens, config.label
