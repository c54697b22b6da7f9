"""Our CPU kernels (int8 weights x integer activations; attention over the cache): what each computes,
and exactly the same for a row whichever rows share the call."""

from __future__ import annotations

import pytest
import torch

from core.runtime.compiled import kernels

pytestmark = pytest.mark.skipif(not kernels.supported(), reason="the kernels need an x86-64 processor with AVX2")


@pytest.fixture(scope="module", autouse=True)
def kernel() -> None:
    from core.runtime.compiled.package import vector_isa_from_flags

    with vector_isa_from_flags():
        kernels.load()


def expected_levels(inputs: int) -> int:
    """Bytes (127) where the kernel multiplies them (AVX-512 VNNI), else as many as int16 and an int32 sum
    of int8 products allow."""
    vnni = torch.backends.cpu.get_cpu_capability() == "AVX512" and torch.cpu._is_vnni_supported()
    return 127 if vnni else min(32767, (2**31 - 1) // (128 * inputs))


@pytest.mark.parametrize("inputs", [8, 576, 11008])
def test_the_kernel_rounds_to_bytes_where_it_multiplies_bytes(inputs: int) -> None:
    assert torch.ops.lookahead.int8_mm_levels(inputs) == expected_levels(inputs)


def reference(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The product the kernel promises, in float64: each row rounded to integers at its own scale
    (amax / levels, :func:`expected_levels`)."""
    levels = expected_levels(x.shape[-1])
    amax = x.abs().amax(-1, keepdim=True)
    inverse = torch.full_like(amax, levels) / amax  # in fp32 as the kernel divides (levels / amax rounds otherwise)
    quantized = torch.round(x * torch.where(amax > 0, inverse, 0))
    return (quantized.double() @ weight.double().t()) * (amax.double() / levels) * scales.double()


@pytest.mark.parametrize(
    ("rows", "inputs", "outputs"),
    [(1, 576, 960), (5, 576, 7), (3, 100, 13), (17, 1536, 6), (2, 8, 5), (9, 200, 33), (32, 576, 70)],
)
def test_the_kernel_computes_the_quantized_product(rows: int, inputs: int, outputs: int) -> None:
    """Any shape (inputs past a vector multiple, outputs past a multiple of 4, odd row counts, rows past a block
    of 8), the full int8 range."""
    generator = torch.Generator().manual_seed(rows * inputs + outputs)
    x = torch.randn(rows, inputs, generator=generator) * 3
    weight = torch.randint(-128, 128, (outputs, inputs), dtype=torch.int8, generator=generator)
    weight[0, 0] = -128
    scales = torch.rand(outputs, generator=generator) / 100
    out = torch.ops.lookahead.int8_mm(x, weight, scales)
    expected = reference(x, weight, scales)
    assert out.dtype == torch.float32 and out.shape == (rows, outputs)
    assert torch.allclose(out.double(), expected, rtol=1e-6, atol=1e-6 * expected.abs().max().item())


@pytest.mark.parametrize("rows", [2, 3, 8, 17])
def test_a_row_gets_the_same_bits_whichever_rows_share_the_call(rows: int) -> None:
    """What makes lookahead's wide steps exact: a row's product does not depend on the other rows."""
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 576, generator=generator)
    x[1] = 0  # a row of zeros: scale 0, products 0
    weight = torch.randint(-127, 128, (960, 576), dtype=torch.int8, generator=generator)
    scales = torch.rand(960, generator=generator) / 100
    together = torch.ops.lookahead.int8_mm(x, weight, scales)
    for row in range(rows):
        assert torch.equal(torch.ops.lookahead.int8_mm(x[row : row + 1], weight, scales)[0], together[row]), row
    assert not together[1].any()


@pytest.mark.parametrize("inputs", [576, 1536, 11008])
def test_the_largest_sums_do_not_overflow(inputs: int) -> None:
    """Every input at its row's maximum and every weight -128: the int32 sum at its largest."""
    x = torch.ones(1, inputs)
    weight = torch.full((4, inputs), -128, dtype=torch.int8)
    out = torch.ops.lookahead.int8_mm(x, weight, torch.ones(4))
    assert torch.allclose(out, torch.full((1, 4), -128.0 * inputs), rtol=1e-6)


def attention_reference(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Softmax attention in float64: query [q, heads, d], keys and values [length, kv_heads, d], mask [q, length]."""
    group = query.shape[1] // keys.shape[1]
    k = keys.double().repeat_interleave(group, dim=1)  # [length, heads, d]
    v = values.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,lhd->hql", query.double(), k) * query.shape[-1] ** -0.5 + mask.double()
    return torch.einsum("hql,lhd->qhd", torch.softmax(scores, dim=-1), v)


def tree_mask(rows: int, past: int, generator: torch.Generator) -> torch.Tensor:
    """Every row sees the cache, itself and a random subset of the rows before it (a lookahead step's tree)."""
    mask = torch.full((rows, past + rows), float("-inf"))
    mask[:, :past] = 0
    for row in range(rows):
        seen = torch.rand(row, generator=generator) < 0.5
        mask[row, past : past + row][seen] = 0
        mask[row, past + row] = 0
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("rows", "heads", "kv_heads", "head_dim"), [(1, 9, 3, 64), (3, 4, 4, 32), (8, 8, 2, 40), (17, 9, 3, 64)]
)
def test_attention_computes_softmax_attention(
    dtype: torch.dtype, rows: int, heads: int, kv_heads: int, head_dim: int
) -> None:
    """Grouped query heads, a head size past a multiple of the vector width (40), bf16 or fp32 caches."""
    generator = torch.Generator().manual_seed(rows * heads + head_dim)
    past = 37
    query = torch.randn(rows, heads, head_dim, generator=generator)
    keys = torch.randn(past + rows, kv_heads, head_dim, generator=generator).to(dtype)
    values = torch.randn(past + rows, kv_heads, head_dim, generator=generator).to(dtype)
    mask = tree_mask(rows, past, generator)
    out = torch.ops.lookahead.attention(query, keys, values, mask.to(dtype), head_dim**-0.5)
    assert out.dtype == torch.float32 and out.shape == query.shape
    assert torch.allclose(out.double(), attention_reference(query, keys, values, mask), atol=1e-5)


@pytest.mark.parametrize("rows", [2, 3, 8, 17])
def test_attention_gives_a_row_the_bits_of_its_own_step(rows: int) -> None:
    """What makes lookahead's wide steps exact: a row of a step under a tree mask gets the bits it gets
    alone, over only the entries it sees, laid out one after another (as they are once accepted)."""
    generator = torch.Generator().manual_seed(rows)
    past = 250
    query = torch.randn(rows, 9, 64, generator=generator)
    keys = torch.randn(past + rows, 3, 64, generator=generator).bfloat16()
    values = torch.randn(past + rows, 3, 64, generator=generator).bfloat16()
    mask = tree_mask(rows, past, generator)
    together = torch.ops.lookahead.attention(query, keys, values, mask.bfloat16(), 0.125)
    for row in range(rows):
        seen = mask[row] == 0
        alone = torch.ops.lookahead.attention(
            query[row : row + 1], keys[seen], values[seen], torch.zeros(1, int(seen.sum())).bfloat16(), 0.125
        )
        assert torch.equal(alone[0], together[row]), row
