"""``lookahead-chat tune``: every setting's tokens per step on this model, which Auto then predicts from."""

from __future__ import annotations

import argparse

from app.cli.loading import load_from_args
from app.cli.output import one_line_errors, progress_printer
from core.autotune.prepare import ensure_calibrated
from core.engine.tune import estimate_table, tune
from core.paths import AppPaths


@one_line_errors
def run(args: argparse.Namespace, paths: AppPaths) -> int:
    _, loaded = load_from_args(args, paths)
    auto = ensure_calibrated(loaded, paths.ensure(), progress_printer())
    calibration = tune(loaded, auto, prompts_per_suite=args.prompts, progress=progress_printer("tune: "))
    curve = calibration.curve
    base = curve.seconds[0]
    print(
        f"Step cost on {loaded.device_info.label}, {loaded.name}, {calibration.dtype} "
        f"(relative to a 1-token step of {base * 1000:.1f} ms):"
    )
    print("| tokens fed | " + " | ".join(str(s) for s in curve.sizes) + " |")
    print("|---|" + "---:|" * len(curve.sizes))
    print("| cost | " + " | ".join(f"{t / base:.2f}" for t in curve.seconds) + " |")
    print()
    print(estimate_table(calibration.estimates))
    print(f"\n{calibration.reason}.")
    return 0
