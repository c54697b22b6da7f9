"""Device, dtype and quantization choice."""

from __future__ import annotations

import pytest
import torch

from core.models.device import (
    FP32_MEMORY_SHARE,
    DeviceInfo,
    cpu_auto_dtype,
    describe_device,
    resolve_device,
    resolve_dtype,
)
from core.models.loader import FOUR_BIT_THRESHOLD, _resolve_quantization
from core.runtime.memory import SystemMemory


def test_cpu_device_and_dtypes() -> None:
    cpu = resolve_device("cpu")
    assert cpu == torch.device("cpu")
    assert (
        resolve_dtype("auto", cpu) == torch.float32
    )  # then Auto keeps it or moves to bf16, as measured (core.autotune.prepare)
    assert [resolve_dtype(n, cpu) for n in ("fp32", "bf16", "fp16")] == [torch.float32, torch.bfloat16, torch.float16]
    assert describe_device(cpu) == DeviceInfo("cpu", "CPU")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == cpu


def test_cpu_dtype_auto_is_bf16_for_a_model_whose_fp32_weights_would_crowd_the_memory() -> None:
    memory = SystemMemory(total=16 * 10**9, available=10 * 10**9)
    fits = int(FP32_MEMORY_SHARE * memory.total / 4)  # parameters
    assert cpu_auto_dtype(fits, memory) == torch.float32
    assert cpu_auto_dtype(fits + 1, memory) == torch.bfloat16
    assert cpu_auto_dtype(10 * fits, None) == torch.float32  # memory unknown: as before


def test_gpu_label() -> None:
    info = DeviceInfo("cuda", "RTX 4070", total_bytes=12 * 2**30, free_bytes=int(4.1 * 2**30))
    assert info.label == "RTX 4070 (7.9/12 GB)"


def test_quantization_defaults() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert _resolve_quantization("auto", cuda, FOUR_BIT_THRESHOLD) == "4bit"
    assert _resolve_quantization("auto", cuda, FOUR_BIT_THRESHOLD - 1) == "none"
    assert _resolve_quantization("auto", cpu, 10 * FOUR_BIT_THRESHOLD) == "none"
    assert _resolve_quantization("none", cuda, 10 * FOUR_BIT_THRESHOLD) == "none"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_device_reported() -> None:
    device = resolve_device("cuda")
    info = describe_device(device)
    assert info.kind == "cuda" and info.total_bytes and 0 < info.free_bytes <= info.total_bytes
