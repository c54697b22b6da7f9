"""The step cost curve in the GPU check: the calibration's own measurement, over wider steps and a longer context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.autotune.measure import measure_step_seconds

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)


def measure_curve(
    model: Any, sizes: Sequence[int] = DEFAULT_SIZES, context: int = 512, repeats: int = 5
) -> list[float]:
    """Median seconds of one step per size, through the decoder's own step implementation."""
    return measure_step_seconds(model, sizes, context, repeats)
