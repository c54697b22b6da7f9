"""The lean LLaMA-family step computes what transformers' forward computes, over a cache written in place."""

from __future__ import annotations

import pytest
import torch

from core.lookahead import Decoding, LookaheadConfig
from core.runtime.architecture import supports_llama_step
from core.runtime.kv_cache import StaticKVCache
from core.runtime.lean_step import LlamaStep
from core.runtime.prepared import PreparedModel
from core.runtime.step import TransformersStep
from tests.conftest import make_model, tiny_llama_config


def _tiny(kind: str, seed: int = 0, **extra):
    from transformers import GemmaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    config = {
        "llama": lambda: tiny_llama_config(96, **extra),
        "mistral": lambda: MistralConfig(**common, sliding_window=extra.get("sliding_window")),
        "qwen2": lambda: Qwen2Config(**common, use_sliding_window=False),
        "gemma": lambda: GemmaConfig(**common, head_dim=16),
    }[kind]()
    return make_model(config, seed=seed)


def _mask(q: int, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """``[q, q]`` additive mask among the new tokens: ``allowed`` (causal by default)."""
    if allowed is None:
        allowed = torch.ones(q, q, dtype=torch.bool).tril()
    return torch.zeros(q, q).masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2"])
def test_logits_equal_transformers_through_prefill_steps_and_compaction(kind: str) -> None:
    model = _tiny(kind, seed=3)
    lean, reference = LlamaStep(model, capacity=8), TransformersStep(model, lookahead=True)  # capacity grows on demand
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 96, (20,), generator=g)
    with torch.inference_mode():
        assert torch.equal(lean.forward(prompt, torch.arange(20), 1), reference.forward(prompt, torch.arange(20), 1))
        past = 20
        for q, sources in [(1, []), (5, [2, 4]), (3, [1, 2]), (1, []), (6, [5])]:
            ids = torch.randint(0, 96, (q,), generator=g)
            positions = past + torch.tensor([0, 1, 1, 2, 3, 2][:q])  # branches share positions, as lookahead's do
            allowed = torch.eye(q, dtype=torch.bool)
            allowed[:, 0] = True
            mask = None if q == 1 else _mask(q, allowed)
            keep = torch.arange(q) if q > 1 else 1
            got, want = lean.forward(ids, positions, keep, mask), reference.forward(ids, positions, keep, mask)
            if mask is None:
                assert torch.equal(got, want), (kind, q)
            else:  # grouped-query attention without transformers' copies of the cache: the same sums, rounded apart
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            lean.keep(past, q, sources)
            reference.keep(past, q, sources)
            past += 1 + len(sources)
            assert lean.length == reference.length == past


def test_a_causal_multi_token_step_after_the_cache_matches_transformers() -> None:
    model = _tiny("llama", seed=4)
    lean, reference = LlamaStep(model, capacity=64), TransformersStep(model, lookahead=True)
    ids = torch.arange(3, 30)
    with torch.inference_mode():
        lean.forward(ids[:15], torch.arange(15), 1)
        reference.forward(ids[:15], torch.arange(15), 1)
        got = lean.forward(ids[15:], torch.arange(15, 27), 4)
        want = reference.forward(ids[15:], torch.arange(15, 27), 4, _mask(12))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_token_half_precision_steps_attend_as_transformers_does(dtype: torch.dtype) -> None:
    model = _tiny("llama", seed=5).to(dtype)
    lean, reference = LlamaStep(model, capacity=64), TransformersStep(model, lookahead=True)
    ids = torch.randint(0, 96, (40,), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        lean.forward(ids[:30], torch.arange(30), 1)
        reference.forward(ids[:30], torch.arange(30), 1)
        for position in range(30, 40):  # the grouped products, not torch's kernel: the same attention, rounded apart
            got = lean.forward(ids[position : position + 1], torch.tensor([position]), 1).float()
            want = reference.forward(ids[position : position + 1], torch.tensor([position]), 1).float()
            torch.testing.assert_close(got, want, rtol=0.02, atol=0.02 * want.abs().max().item())


def test_only_architectures_it_computes_exactly_take_the_lean_step() -> None:
    assert supports_llama_step(_tiny("llama")) and supports_llama_step(_tiny("qwen2"))
    assert not supports_llama_step(_tiny("gemma"))  # scaled embeddings, (1 + w) norms
    assert not supports_llama_step(_tiny("mistral", sliding_window=8))  # the window lives in transformers' masks
    split = _tiny("llama")
    split.hf_device_map = {"model.layers.0": "cpu", "model.layers.1": "disk"}  # as accelerate marks an offloaded model
    assert not supports_llama_step(split)
    assert isinstance(PreparedModel(_tiny("gemma")).step(32, lookahead=True), TransformersStep)
    assert isinstance(PreparedModel(_tiny("llama")).step(32, lookahead=False), LlamaStep)


@pytest.mark.parametrize("seed", range(3))
def test_decoding_on_the_lean_step_equals_generate(seed: int) -> None:
    model = _tiny("llama", seed=seed)
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(3, 96, (12,), generator=g).tolist()
    prompt = half + half
    reference = model.generate(torch.tensor([prompt]), max_new_tokens=60, do_sample=False, min_new_tokens=60)[
        0, len(prompt) :
    ].tolist()
    for config in (None, LookaheadConfig(5, 4, 5), LookaheadConfig(0, 3, 2)):
        decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=60)
        assert decoding.tokens == [] and list(decoding)
        assert decoding.tokens == reference, config


def test_the_cache_grows_keeping_its_entries_and_is_allocated_in_the_layer_dtype() -> None:
    cache = StaticKVCache(layers=1, capacity=2)
    first = torch.randn(1, 2, 2, 4, dtype=torch.bfloat16)
    cache.write(0, first, first)
    cache.advance(2)
    cache.reserve(5)
    keys, _ = cache.write(0, torch.ones(1, 2, 3, 4, dtype=torch.bfloat16), torch.ones(1, 2, 3, 4, dtype=torch.bfloat16))
    assert cache.capacity >= 5 and keys.dtype == torch.bfloat16
    assert torch.equal(keys[:, :, :2], first) and torch.equal(
        keys[:, :, 2:], torch.ones(1, 2, 3, 4, dtype=torch.bfloat16)
    )
    cache.advance(3)
    cache.keep(1, 4, [3])  # keep slot 1 and slot 4, moved next to it
    assert cache.length == 3 and torch.equal(cache.keys[0][2], torch.ones(2, 4, dtype=torch.bfloat16))


@pytest.mark.parametrize("lean", [True, False])
def test_passing_over_a_context_takes_its_entries_and_later_steps_attend_to_them(lean: bool) -> None:
    """What measuring a step after a context does instead of a prefill: the lean step computes nothing for the
    entries (zeros), transformers' step prefills them; a step after them attends to every one."""
    model = _tiny("llama", seed=3)
    step = LlamaStep(model, 8) if lean else TransformersStep(model, lookahead=True)
    calls: list[int] = []
    hook = model.model.layers[0].mlp.register_forward_hook(lambda *args: calls.append(1))
    with torch.inference_mode():
        step.pass_over(40)  # beyond the capacity asked for: the cache grows
        assert step.length == 40 and len(calls) == (0 if lean else 1)
        logits = step.forward(torch.tensor([5, 6, 7]), torch.arange(40, 43), 3, _mask(3))
        step.keep(40, 3, [1])
    hook.remove()
    assert logits.shape == (3, 96) and torch.isfinite(logits).all() and step.length == 42
    alone = LlamaStep(model, 8) if lean else TransformersStep(model, lookahead=True)
    with torch.inference_mode():  # the same tokens at the same positions with nothing before them
        without = alone.forward(torch.tensor([5, 6, 7]), torch.arange(40, 43), 3, _mask(3))
    assert not torch.allclose(logits, without)  # the 40 entries took part in the attention
