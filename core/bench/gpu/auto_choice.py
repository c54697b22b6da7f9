"""What 'Auto' picks on this device: a thin, guarded call into ``core.lookahead.auto.calibrate``.

Expected API (the lead's module): ``calibrate(model, device=..., progress=None)`` returns an object
with ``.choice`` (a LookaheadConfig, or None for plain decoding), ``.seconds`` (how long
calibration took) and ``.as_dict()``. Where that module is absent the check reports so and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from core.lookahead import LookaheadConfig


@dataclass
class AutoOutcome:
    """Auto's choice, or why there is none."""

    available: bool
    note: str
    choice: LookaheadConfig | None = None
    seconds: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"available": self.available, "note": self.note, "choice": self.choice.label if self.choice else None,
                "seconds": self.seconds, "details": self.details}


def calibrate_auto(model: Any, device: torch.device) -> AutoOutcome:
    """Run Auto's calibration on ``model`` (wired to core.lookahead.auto; adjust here if its API changes)."""
    try:
        from core.lookahead.auto import calibrate
    except ImportError as err:
        return AutoOutcome(False, f"auto: not available in this checkout ({err})")
    try:
        calibration = calibrate(model, device=device, progress=None)
    except Exception as err:  # the grid still runs without Auto
        return AutoOutcome(False, f"auto: calibration failed ({type(err).__name__}: {err})")
    choice = calibration.choice
    picked = choice.label if choice is not None else "plain decoding"
    return AutoOutcome(True, f"auto picks {picked} after {calibration.seconds:.1f} s of calibration",
                       choice, float(calibration.seconds), dict(calibration.as_dict()))
