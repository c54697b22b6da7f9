"""Choosing the float weights' layout by measuring it: the model is left in the layout reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from core.autotune.layout import choose_layout
from core.lookahead import Decoding
from core.runtime.weights.packed import PACKED, PACKED_ROWS, PLAIN, layout_of
from tests.conftest import make_model, tiny_llama_config


def _decode(model: nn.Module, prompt: list[int], tokens: int = 48) -> Decoding:
    decoding = Decoding(model, prompt, max_new_tokens=tokens)
    list(decoding)
    return decoding


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_choose_layout_leaves_the_model_in_the_layout_it_reports(dtype: torch.dtype) -> None:
    model = make_model(tiny_llama_config(256)).to(dtype)
    prompt = list(range(3, 30))
    expected = _decode(model, prompt, tokens=16).tokens
    layout = choose_layout(model)
    assert layout == layout_of(model) and layout in (PLAIN, PACKED, PACKED_ROWS)
    assert layout != PACKED_ROWS or dtype == torch.bfloat16
    decoded = _decode(model, prompt, tokens=16).tokens
    assert len(decoded) == 16
    if dtype == torch.float32:  # bf16 kernels may round apart after a near-tie; fp32 ones agree here
        assert decoded == expected


def test_a_model_without_float_linears_has_no_layout_to_measure() -> None:
    from core.runtime.weights.quantized import quantize_model

    model = make_model(tiny_llama_config(256))
    quantize_model(model, 8)  # every linear int8, the head included
    steps: list[int] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda *args: steps.append(1))
    try:
        assert choose_layout(model) == PLAIN
    finally:
        hook.remove()
    assert not steps  # no step was run to measure


def test_a_processor_that_cannot_pack_the_dtype_keeps_the_plain_layout() -> None:
    """oneDNN packs bf16 only with AVX-512 (or AVX-NE-CONVERT): capped at AVX2, the model stays as it was."""
    script = (
        "import torch\n"
        "from core.lookahead import Decoding\n"
        "from core.autotune.layout import choose_layout\n"
        "from core.runtime.weights.packed import layout_of\n"
        "from tests.conftest import make_model, tiny_llama_config\n"
        "model = make_model(tiny_llama_config(96)).to(torch.bfloat16)\n"
        "print(choose_layout(model), layout_of(model))\n"
        "decoding = Decoding(model, list(range(3, 20)), max_new_tokens=8)\n"
        "print(len([s for s in decoding]) > 0, len(decoding.tokens))\n"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["plain", "plain", "True", "8"]
