"""Perplexity of a causal LM on a fixed text: how much a quantization changes answer quality."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from core.paths import resource_path
from core.runtime.compiled import kernels
from core.runtime.compiled.step import CompiledStep, compile_step
from core.runtime.prepared import PreparedModel


def quality_text_path() -> Path:
    """The fixed text shipped for quality checks (our own prose and instructions, about 400 tokens)."""
    return resource_path("quality", "perplexity.txt")


def perplexity(model: Any, token_ids: list[int], window: int = 512) -> float:
    """exp(mean negative log-likelihood) of every token after the first, in chunks of ``window`` tokens.

    Each chunk is scored on its own (no context carried over); the log-probabilities are taken in
    fp32 whatever the model's dtype.
    """
    if len(token_ids) < 2:
        raise ValueError("Perplexity needs at least two tokens of text.")
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(token_ids) - 1, window):
            chunk = torch.tensor([token_ids[start : start + window + 1]], device=device)
            logits = model(input_ids=chunk[:, :-1]).logits.float()
            losses = torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="sum")
            total += float(losses)
            count += chunk.shape[1] - 1
    return math.exp(total / count)


def step_perplexity(model: PreparedModel, token_ids: list[int], window: int = 512) -> float:
    """:func:`perplexity` as decoding computes it: one token a step through the model's steps (its
    compiled layers where it has them, whose int8 products quantize the activations too)."""
    if len(token_ids) < 2:
        raise ValueError("Perplexity needs at least two tokens of text.")
    total, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(token_ids) - 1, window):
            chunk = token_ids[start : start + window + 1]
            step = model.step(len(chunk), lookahead=False)
            for position, (token, following) in enumerate(zip(chunk, chunk[1:])):
                logits = step.forward(torch.tensor([token]), torch.tensor([position]), 1).float()
                total += float(torch.nn.functional.cross_entropy(logits, torch.tensor([following]), reduction="sum"))
            count += len(chunk) - 1
    return math.exp(total / count)


def compiled_step_perplexity(model: Any, token_ids: list[int]) -> tuple[float, str] | None:
    """:func:`step_perplexity` through the CPU's compiled steps for ``model`` (int8 weights), and what its
    products multiply: ``int8 activations`` (the int8 decoder's) or ``weight-only``; None where no step compiles
    (no compiler, say)."""
    compiled = compile_step(model)
    if not isinstance(compiled, CompiledStep):
        return None
    activations = f"int{kernels.activation_bits()} activations" if compiled.decoder else "weight-only"
    return step_perplexity(PreparedModel(model, compiled), token_ids), activations
