"""Our CPU kernel, ``lookahead::int8_decoder`` (a whole int8 decoding step in one call): what it computes,
and exactly the same logits for a token whichever tokens share its step."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import pytest
import torch

from core.runtime.compiled import kernels
from core.runtime.compiled.int8_decoder import Int8Decoder, why_not_int8_decoder
from core.runtime.step import RANKED
from core.runtime.weights.fused import fuse_projections, head_weights
from core.runtime.weights.quantized import Int8WeightLinear, quantize_model
from tests.conftest import make_model, tiny_llama_config

pytestmark = pytest.mark.skipif(not kernels.supported(), reason="the kernels need an x86-64 processor with AVX2")


@pytest.fixture(scope="module", autouse=True)
def kernel() -> None:
    kernels.load()


def vnni() -> bool:
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and torch.cpu._is_vnni_supported()


def expected_levels(inputs: int) -> int:
    """Two bytes (127 x 128 levels) where the kernel multiplies bytes (AVX-512 VNNI), else as many as int16 and
    an int32 sum of int8 products allow."""
    return 127 * 128 if vnni() else min(32767, (2**31 - 1) // (128 * inputs))


@pytest.mark.parametrize("inputs", [8, 576, 11008])
def test_the_kernel_rounds_to_two_bytes_where_it_multiplies_bytes(inputs: int) -> None:
    assert torch.ops.lookahead.int8_levels(inputs) == expected_levels(inputs)
    assert kernels.activation_bits() == (15 if vnni() else 16) and kernels.packs_weights() == vnni()


def int8_model(seed: int = 0, **config) -> torch.nn.Module:
    """A tiny random LLaMA with int8 weights (head included), its projections joined: what the decoder reads."""
    model = make_model(tiny_llama_config(96, **config), seed=seed)
    quantize_model(model, 8)
    fuse_projections(model)
    assert why_not_int8_decoder(model) is None
    return model


@contextlib.contextmanager
def rounded_activations(model: torch.nn.Module) -> Iterator[None]:
    """The model's eager int8 products with each input row rounded as the kernel promises: to integers at
    the row's own scale (amax / levels, the division in fp32), nearest even."""

    def round_rows(module: Int8WeightLinear, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor]:
        x = args[0]
        levels = expected_levels(x.shape[-1])
        amax = x.abs().amax(-1, keepdim=True)
        inverse = torch.where(amax > 0, torch.full_like(amax, levels) / amax, 0)
        return (torch.round(x * inverse) * (amax / levels),)

    hooks = [m.register_forward_pre_hook(round_rows) for m in model.modules() if isinstance(m, Int8WeightLinear)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


class Step:
    """Steps of ``model`` through the decoder over caches of its own (``[capacity, kv_heads, head_dim]``)."""

    def __init__(self, model: torch.nn.Module, cache_dtype: torch.dtype = torch.float32, capacity: int = 128) -> None:
        config = model.config
        self.model, self.decoder = model, Int8Decoder.of(model)
        shape = (capacity, config.num_key_value_heads, self.decoder.head_dim)
        self.keys = [torch.zeros(shape, dtype=cache_dtype) for _ in model.model.layers]
        self.values = [torch.zeros(shape, dtype=cache_dtype) for _ in model.model.layers]

    def __call__(
        self, ids: torch.Tensor, positions: torch.Tensor, past: int, mask: torch.Tensor | None = None, rows=None
    ) -> torch.Tensor:
        hidden = self.model.model.embed_tokens(ids[None])
        cos, sin = (table[0].float().contiguous() for table in self.model.model.rotary_emb(hidden, positions[None]))
        rows = torch.arange(len(ids)) if rows is None else rows
        cache = self.decoder.hold_cache(self.keys, self.values)
        logits, indices, values = self.decoder(ids, torch.arange(len(ids)), cos, sin, cache, past, mask, rows)
        for row, ranks, highest in zip(logits.tolist(), indices.tolist(), values.tolist()):  # found as the head ended
            order = sorted(range(len(row)), key=lambda i: (0, 0.0, i) if math.isnan(row[i]) else (1, -row[i], i))
            assert ranks == order[: len(ranks)] and len(ranks) == min(RANKED, len(row))
            assert all(a == row[i] or math.isnan(a) for a, i in zip(highest, ranks))
        assert torch.equal(indices[:, 0], logits.argmax(-1))  # the first: torch's choice
        return logits


@pytest.mark.parametrize(
    "config",
    [
        {},  # head size 16, two query heads per kv head
        dict(hidden_size=288, num_attention_heads=9, num_key_value_heads=3, intermediate_size=200),  # 32
        dict(hidden_size=256, num_attention_heads=8, num_key_value_heads=2),  # 32, four query heads per kv head
        dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=4, attention_bias=True, mlp_bias=True),
        dict(hidden_size=160, num_attention_heads=2, num_key_value_heads=1, intermediate_size=96),  # 80
        dict(hidden_size=256, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=1),  # 128
    ],
)
def test_the_decoder_computes_the_model_with_rounded_activations(config: dict) -> None:
    """Every layer's norms, rotary embedding, grouped attention, SiLU, biases and residuals, the head: the
    eager model's logits, each product's input rows rounded as the kernel's, to fp32's rounding (a sum in
    another order may round an activation to the next level now and then)."""
    model = int8_model(seed=len(config), **config)
    ids = torch.randint(3, 96, (21,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), rounded_activations(model):
        expected = model(ids[None]).logits[0]
    with torch.no_grad():
        logits = Step(model)(ids, torch.arange(21), 0)
    assert logits.dtype == torch.float32 and logits.shape == expected.shape
    close = torch.isclose(logits, expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())
    assert close.float().mean() > 0.99, (logits - expected).abs().max()
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


def tree_mask(rows: int, generator: torch.Generator) -> torch.Tensor:
    """Among a step's rows: each sees itself and a random subset of the rows before it (a lookahead step's
    tree); every row sees the whole cache."""
    mask = torch.full((rows, rows), float("-inf"))
    for row in range(rows):
        seen = torch.rand(row, generator=generator) < 0.5
        mask[row, :row][seen] = 0
        mask[row, row] = 0
    return mask


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [2, 3, 8, 17])
def test_a_token_gets_the_logits_of_its_own_1_token_step(rows: int, cache_dtype: torch.dtype) -> None:
    """What makes greedy lookahead exact in int8: each token of a step under a tree mask gets the bits of a
    1-token step over only the entries it sees, laid out one after another (as they are once accepted);
    and a step that keeps some rows gives those rows' logits alone."""
    model = int8_model(seed=rows, hidden_size=288, num_attention_heads=9, num_key_value_heads=3)
    generator = torch.Generator().manual_seed(rows)
    past = 40
    step = Step(model, cache_dtype)
    with torch.no_grad():
        step(torch.randint(3, 96, (past,), generator=generator), torch.arange(past), 0, rows=torch.arange(0))
        ids = torch.randint(3, 96, (rows,), generator=generator)
        positions = past + torch.randint(0, rows, (rows,), generator=generator)  # a tree's depths
        mask = tree_mask(rows, generator)
        together = step(ids, positions, past, mask)
        kept = torch.tensor([rows - 1, 0])
        assert torch.equal(step(ids, positions, past, mask, rows=kept), together[kept])
        for row in range(rows):
            seen = torch.cat([torch.arange(past), past + (mask[row] == 0).nonzero()[:-1, 0]])  # before its own
            alone = Step(model, cache_dtype)
            for mine, whole in zip(alone.keys + alone.values, step.keys + step.values):
                mine[: len(seen)] = whole[seen]
            logits = alone(ids[row : row + 1], positions[row : row + 1], len(seen))
            assert torch.equal(logits[0], together[row]), row
            for mine, whole in zip(alone.keys + alone.values, step.keys + step.values):
                assert torch.equal(mine[len(seen)], whole[past + row])  # its own cache entries alike


def test_each_rows_choice_is_torchs_first_maximum_ties_and_nan_included() -> None:
    """The kernel's greedy choice is torch.max's: on a tie the lowest index (also across the threads' shares
    of the vocabulary), and a NaN over any number."""
    model = int8_model(seed=7)
    ids = torch.randint(3, 96, (4,), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        winner = int(Step(model)(ids, torch.arange(4), 0)[-1].argmax())
        _, head, scales, _ = head_weights(model)
        for tied in (5, 90):  # two channels far apart, the same weights and scale, above every other
            head[tied] = head[winner]
            scales[tied] = 10 * scales[winner]
        step = Step(model)
        logits = step(ids, torch.arange(4), 0)
        assert logits[-1, 5] == logits[-1, 90] and int(logits[-1].argmax()) == 5
        scales[70] = float("nan")
        logits = Step(model)(ids, torch.arange(4), 0)
        assert logits[:, 70].isnan().all() and (logits.argmax(-1) == 70).all()


def test_bad_inputs_are_clear_errors() -> None:
    model = int8_model()
    step = Step(model)
    ids = torch.tensor([5, 6, 7])
    with pytest.raises(RuntimeError, match=r"mask \[q, q\]"):
        step(ids, torch.arange(3), 0, torch.zeros(3, 4))
    with pytest.raises(RuntimeError, match="rows within the step"):
        step(ids, torch.arange(3), 0, rows=torch.tensor([3]))
    with pytest.raises(RuntimeError, match="room for past \\+ q entries"):
        step(ids, torch.arange(3), 126)
    tables = torch.zeros(3, step.decoder.head_dim), torch.zeros(3, step.decoder.head_dim)
    cache, one = step.decoder.hold_cache(step.keys, step.values), torch.arange(1)
    with pytest.raises(RuntimeError, match="token ids within the embedding table"):
        step.decoder(torch.tensor([model.config.vocab_size]), one, *tables, cache, 0, None, one)
    with pytest.raises(RuntimeError, match="positions within the rotary tables"):
        step.decoder(torch.tensor([5]), torch.tensor([3]), *tables, cache, 0, None, one)
    with pytest.raises(RuntimeError, match="of one shape and dtype"):
        step.decoder.hold_cache(step.keys, [v.bfloat16() for v in step.values])
    with pytest.raises(RuntimeError, match="a cache of the model's layers"):
        step.decoder(
            torch.tensor([5]), one, *tables, step.decoder.hold_cache(step.keys[:1], step.values[:1]), 0, None, one
        )
