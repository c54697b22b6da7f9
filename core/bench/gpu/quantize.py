"""bitsandbytes 4-bit NF4 and 8-bit linear layers for random models, without a checkpoint on disk.

transformers' ``BitsAndBytesConfig`` needs weights loaded through ``from_pretrained``; saving a random
8B model first would cost minutes. So the decoder layers' ``nn.Linear`` modules are swapped for
bitsandbytes' own ``Linear4bit`` / ``Linear8bitLt`` (the modules transformers puts there), and
their weights quantized by bitsandbytes' own parameter classes. The LM head stays unquantized,
as transformers leaves it.
"""

from __future__ import annotations

from typing import Any

import torch

FUSED_4BIT_VERSION = (0, 50)
"""bitsandbytes from which 4-bit steps of 2-64 rows run fused kernels (the app requires it, pyproject.toml)."""


def bitsandbytes_status() -> tuple[bool, str]:
    """Whether bitsandbytes can be used here, and a line saying which version or why not."""
    try:
        import bitsandbytes  # optional: the GPU check runs without bitsandbytes
    except Exception as err:  # ImportError, or a native library that fails to load
        return False, f"bitsandbytes not importable ({type(err).__name__}: {err}): 4-bit and 8-bit skipped"
    version = bitsandbytes.__version__
    major_minor = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if major_minor < FUSED_4BIT_VERSION:  # the step cost curves then show it: every wider step a dequantize
        return True, (
            f"bitsandbytes {version}: older than 0.50, whose fused 4-bit kernels take 2-64 rows; wider steps "
            "dequantize the whole weight here (pip install 'bitsandbytes>=0.50')"
        )
    return True, f"bitsandbytes {version}"


def quantize_linears(model: Any, mode: str, compute_dtype: torch.dtype) -> int:
    """Replace every ``nn.Linear`` inside the decoder layers by a bitsandbytes one; return how many."""
    import bitsandbytes as bnb  # optional: the GPU check runs without bitsandbytes

    replaced = 0
    for layer in model.model.layers:
        for parent in layer.modules():
            for name, child in list(parent.named_children()):
                if type(child) is not torch.nn.Linear:
                    continue
                setattr(parent, name, _quantized(bnb, child, mode, compute_dtype))
                replaced += 1
    return replaced


def _quantized(bnb: Any, linear: torch.nn.Linear, mode: str, compute_dtype: torch.dtype) -> torch.nn.Module:
    device = linear.weight.device
    weight = linear.weight.data
    if mode == "nf4":
        module = bnb.nn.Linear4bit(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            compute_dtype=compute_dtype,
            compress_statistics=False,
            quant_type="nf4",
            device="meta",
        )
        # Params4bit quantizes on its first move to a real device, from wherever the data is. No double
        # quantization: the app loads 4-bit with BitsAndBytesConfig's default, bnb_4bit_use_double_quant=False.
        module.weight = bnb.nn.Params4bit(
            weight, requires_grad=False, compress_statistics=False, quant_type="nf4", module=module
        ).to(device)
    elif mode == "int8":
        module = bnb.nn.Linear8bitLt(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            has_fp16_weights=False,
            threshold=6.0,
            device="meta",
        )  # BitsAndBytesConfig's defaults
        # Int8Params quantizes when moved from the CPU to a device, so the weight takes one round trip.
        module.weight = bnb.nn.Int8Params(
            weight.to("cpu", torch.float16), requires_grad=False, has_fp16_weights=False
        ).to(device)
    else:
        raise ValueError(f"Unknown quantization '{mode}': use nf4 or int8.")
    if linear.bias is not None:
        module.bias = torch.nn.Parameter(linear.bias.data, requires_grad=False)
    return module
