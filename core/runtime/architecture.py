"""Which models the lean LLaMA step computes exactly, and so which step implementation runs a model."""

from __future__ import annotations

from typing import Any

from core.runtime.sliding import sliding_window_of

SUPPORTED_TYPES = frozenset({"llama", "mistral", "qwen2"})
"""Architectures whose decoder layer is exactly: norm, attention (q/k/v/o projections, rotary), norm, MLP."""


def supports_llama_step(model: Any) -> bool:
    """True when :class:`~core.runtime.lean_step.LlamaStep` computes ``model`` exactly as transformers does."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if sliding_window_of(config) is not None or getattr(model, "training", False):
        return False
    if len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1:  # split or offloaded: accelerate's
        return False  # hooks on the decoder layers move activations, and this forward does not call the layers
    inner = getattr(model, "model", None)
    return (
        inner is not None
        and hasattr(model, "lm_head")
        and hasattr(inner, "rotary_emb")
        and all(hasattr(layer.self_attn, "q_proj") and not hasattr(layer.self_attn, "q_norm") for layer in inner.layers)
    )


def step_kind(model: Any) -> str:
    """Which implementation runs ``model``: ``lean`` (:class:`~core.runtime.lean_step.LlamaStep`) or
    ``transformers`` (:class:`~core.runtime.step.TransformersStep`)."""
    return "lean" if supports_llama_step(model) else "transformers"
