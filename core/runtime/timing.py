"""Timing a step: device work is asynchronous, so the clock is read only after it is done."""

from __future__ import annotations

import time

import torch


def device_sync(device: torch.device) -> None:
    """Wait for queued device work so that a clock read measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class StepTimer:
    """Times one step: synchronises the device before reading the clock at both ends."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._start = 0.0

    def start(self) -> None:
        device_sync(self.device)
        self._start = time.perf_counter()

    def stop(self) -> float:
        device_sync(self.device)
        return time.perf_counter() - self._start
