"""What Auto picks on this device, and the chooser that then decodes: ``core.autotune.chooser``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from core.autotune.calibration import calibrate
from core.autotune.chooser import AutoChooser
from core.lookahead import LookaheadConfig


@dataclass
class AutoOutcome:
    """Auto's calibration: its first choice and the chooser, or why there is none."""

    available: bool
    note: str
    choice: LookaheadConfig | None = None
    seconds: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    chooser: AutoChooser | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "note": self.note,
            "choice": self.choice.label if self.choice else None,
            "seconds": self.seconds,
            "details": self.details,
        }


def calibrate_auto(model: Any, device: torch.device) -> AutoOutcome:
    """Run Auto's calibration on ``model``; a failure is reported and the grid still runs."""
    try:
        calibration = calibrate(model, device=device)
    except Exception as err:  # the grid still runs without Auto
        return AutoOutcome(False, f"auto: calibration failed ({type(err).__name__}: {err})")
    choice = calibration.choice
    picked = choice.label if choice is not None else "plain decoding"
    return AutoOutcome(
        True,
        f"{calibration.reason}; calibration took {calibration.seconds:.1f} s (Auto starts with {picked})",
        choice,
        float(calibration.seconds),
        dict(calibration.as_dict()),
        AutoChooser(calibration),
    )
