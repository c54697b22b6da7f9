"""The model variants a benchmark runs, prepared by Auto's own code (``core.autotune.prepare``)."""

from __future__ import annotations

from collections.abc import Sequence

from core.autotune.prepare import PreparedVariants, prepare_variants, variant_copies
from core.autotune.variants import auto_chooses_variant
from core.models.device import DTYPE_BY_NAME, NAME_BY_DTYPE
from core.models.loader import LoadedModel
from core.runtime.prepared import PreparedModel
from core.runtime.weights.packed import layout_of
from core.runtime.weights.variants import dtype_copy


def bench_variants(loaded: LoadedModel, dtypes: Sequence[str] = ()) -> PreparedVariants:
    """The loaded model and copies in ``dtypes`` (``fp32``, ``bf16``, ``fp16``); with none asked for, on the CPU
    with dtype auto, what Auto chooses between there (fp32, bf16 and with quantization auto int8 weights).
    Every variant gets its fastest weight layout and step: the bench compares each at its best. A GGUF file's
    weights as stored run as loaded (the int8 decoder on the file's blocks): the one variant, as the app runs it."""
    if loaded.weights_as_stored:
        if dtypes:
            raise ValueError(
                "a GGUF file's weights as stored run in their own types: leave out --dtypes, or load it with "
                "--quantization none for copies in other dtypes"
            )
        return PreparedVariants({NAME_BY_DTYPE[loaded.dtype]: loaded.prepared})  # as calibration names it
    if not dtypes and auto_chooses_variant(loaded):
        models = variant_copies(loaded).models
    else:
        models = {NAME_BY_DTYPE.get(loaded.dtype, "other"): loaded.model}
        for name in dtypes:
            if name not in models:
                models[name] = dtype_copy(loaded.model, DTYPE_BY_NAME[name])
    return prepare_variants(models, None, every_variant=True)


def weight_layouts(variants: PreparedVariants) -> dict[str, str]:
    """Each variant's weight layout (``plain``, ``packed``, ``packed+rows``)."""
    return {name: layout_of(model.model) for name, model in variants.models.items()}


def compiled_layers(model: PreparedModel) -> str:
    """Which compiled layers a variant runs: ``1-token+rows``, ``1-token``, ``rows`` (every step), ``int8 decoder``
    (every step), or ``none``."""
    step = model.compiled
    if step is not None and step.decoder is not None:
        return "int8 decoder"
    names = [] if step is None else [n for n, layer in (("1-token", step.one_token), ("rows", step.rows)) if layer]
    return "+".join(names) or "none"
