"""Which layout of the float weights makes this CPU's steps fastest: plain, packed for oneDNN, or both."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from core.autotune.measure import measure_step_seconds
from core.runtime.weights.packed import (
    PACKED,
    PACKED_ROWS,
    PLAIN,
    apply_layout,
    float_dtype,
    layout_of,
    packing_available,
    rows_copy_allowed,
)

log = logging.getLogger(__name__)

LAYOUT_MARGIN = 1.03  # a layout must make the measured steps this much cheaper to replace the one before it


def choose_layout(model: Any, cancelled: Callable[[], bool] | None = None) -> str:
    """Measure a 1-token and an 8-token step in each layout; leave ``model`` in the fastest and return it.

    A CPU float model in the plain layout only; anything else stays as it is (and its layout is
    returned). A dtype this processor's oneDNN cannot pack (bf16 without AVX-512 or AVX-NE-CONVERT,
    for one) keeps the plain layout.
    """
    if model.device.type != "cpu" or not packing_available() or layout_of(model) != PLAIN:
        return layout_of(model)
    if float_dtype(model) is None:  # no float linear to lay out (all int8, say): nothing to measure
        return PLAIN

    def cost() -> float:
        return sum(measure_step_seconds(model, (1, 8), context=128, repeats=3, cancelled=cancelled))

    best, best_cost = PLAIN, cost()
    candidates = [PACKED] + ([PACKED_ROWS] if rows_copy_allowed(model) else [])
    try:
        for layout in candidates:
            if not apply_layout(model, layout):
                return PLAIN
            measured = cost()
            if measured * LAYOUT_MARGIN <= best_cost:
                best, best_cost = layout, measured
    except RuntimeError as err:  # oneDNN refuses this dtype on this processor
        log.info("weights stay in the plain layout: %s", err)
        best = PLAIN
    if layout_of(model) != best:  # the last layout measured is often the fastest: no second repacking then
        apply_layout(model, best)
    return best
