"""Device choice and description: which device, its name and memory, the default dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.models.errors import DeviceUnavailableError
from core.runtime.memory import SystemMemory

DTYPE_BY_NAME: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAME_BY_DTYPE: dict[torch.dtype, str] = {v: k for k, v in DTYPE_BY_NAME.items()}

# dtype auto on the CPU loads fp32 (exact, and convertible); Auto's calibration (core.autotune)
# then keeps it or converts to bf16, whichever decodes faster on this machine.
CPU_DEFAULT_DTYPE = "fp32"
FP32_MEMORY_SHARE = 0.4
"""dtype auto on the CPU loads fp32 weights only where they take at most this share of the computer's
memory: calibration adds bf16 and int8 copies (a half and about a quarter as much again). A bigger model
loads in bf16, which also decodes faster wherever memory bounds the step."""


@dataclass(frozen=True)
class DeviceInfo:
    """A device as shown to the user."""

    kind: str  # "cuda" or "cpu"
    name: str
    total_bytes: int | None = None
    free_bytes: int | None = None

    @property
    def label(self) -> str:
        if self.total_bytes is None or self.free_bytes is None:
            return self.name
        used = (self.total_bytes - self.free_bytes) / 2**30
        return f"{self.name} ({used:.1f}/{self.total_bytes / 2**30:.0f} GB)"


def resolve_device(requested: str) -> torch.device:
    """Turn ``auto``/``cuda``/``cpu`` into a torch device, or raise if CUDA is asked for but absent."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            "CUDA was asked for, but no CUDA GPU is usable (no NVIDIA GPU, no driver, or a CPU-only PyTorch).",
            "Choose device 'auto' or 'cpu', or install the CUDA build of PyTorch (README, 'GPU').",
        )
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def describe_device(device: torch.device) -> DeviceInfo:
    """Name and memory of a device; memory is read now, so call it again to refresh."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return DeviceInfo("cuda", torch.cuda.get_device_name(device), total, free)
    return DeviceInfo("cpu", "CPU")


def resolve_dtype(requested: str, device: torch.device) -> torch.dtype:
    """The dtype for ``requested`` on ``device``; ``auto`` picks the measured best for the device."""
    if requested != "auto":
        return DTYPE_BY_NAME[requested]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return DTYPE_BY_NAME[CPU_DEFAULT_DTYPE]


def cpu_auto_dtype(parameters: int, memory: SystemMemory | None) -> torch.dtype:
    """What dtype auto loads on the CPU: fp32, or bf16 for a model whose fp32 weights would take more
    than :data:`FP32_MEMORY_SHARE` of the computer's memory (fp32 where the memory is unknown)."""
    if memory is not None and 4 * parameters > FP32_MEMORY_SHARE * memory.total:
        return torch.bfloat16
    return DTYPE_BY_NAME[CPU_DEFAULT_DTYPE]
