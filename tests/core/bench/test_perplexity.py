"""Perplexity on a fixed text: the exact definition, chunking, and the shipped text."""

from __future__ import annotations

import math

import pytest
import torch

from core.bench.perplexity import perplexity, quality_text_path
from tests.conftest import make_model, tiny_llama_config


def test_perplexity_is_exp_of_the_mean_token_loss() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    ids = torch.randint(3, 96, (30,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    expected = math.exp(torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:])).item())
    assert perplexity(model, ids) == pytest.approx(expected, rel=1e-5)
    chunked = perplexity(model, ids, window=8)  # every chunk starts without context: a little worse
    assert chunked == pytest.approx(expected, rel=0.2) and chunked != pytest.approx(expected, rel=1e-6)


def test_random_model_is_near_uniform_and_short_text_is_refused() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    ids = torch.randint(3, 96, (60,), generator=torch.Generator().manual_seed(1)).tolist()
    assert 40 < perplexity(model, ids) < 200  # about the vocabulary size
    with pytest.raises(ValueError, match="two tokens"):
        perplexity(model, ids[:1])


def test_the_quality_text_ships() -> None:
    text = quality_text_path().read_text(encoding="utf-8")
    assert 1500 < len(text) < 4000
