"""A model as decoding runs it: the model, and the compiled layers where they were kept for it.

What makes a model's steps fast on this machine (its weight layout, int8 weights, the compiled step)
is chosen by ``core.autotune``; the choice that has state beyond the model's own modules, the
compiled layer, is held here, explicitly, so that every step built for the model uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.runtime.architecture import supports_llama_step
from core.runtime.compiled.step import CompiledStep
from core.runtime.lean_step import LlamaStep
from core.runtime.step import ModelStep, TransformersStep
from core.runtime.weights.blocks import activation_dtype


@dataclass(frozen=True)
class PreparedModel:
    """A transformers causal LM, with its compiled layers (``None``: eager steps only)."""

    model: Any
    compiled: CompiledStep | None = None

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        """The activations' dtype: the input embedding's."""
        return activation_dtype(self.model)

    def step(self, capacity: int, *, lookahead: bool) -> ModelStep:
        """A new step with an empty KV cache, on the fastest implementation that runs the model exactly;
        ``capacity`` is the expected cache size, ``lookahead`` whether steps will keep only some entries."""
        if supports_llama_step(self.model):
            compiled = self.compiled.inputs(self.model) if self.compiled is not None else None
            return LlamaStep(self.model, capacity, compiled)
        return TransformersStep(self.model, lookahead=lookahead)


def prepared(model: Any) -> PreparedModel:
    """``model`` as a :class:`PreparedModel`: itself if it is one, else with eager steps only."""
    return model if isinstance(model, PreparedModel) else PreparedModel(model)
