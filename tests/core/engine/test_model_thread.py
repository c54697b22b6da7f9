"""The model thread's loads: what it reports while a model loads and Auto measures the machine."""

from __future__ import annotations

import threading

from core.autotune.prepare import STAGE
from core.engine.model_thread import ModelThread
from core.models.options import LoadOptions, ModelSource


class Events:
    def __init__(self) -> None:
        self.progress: list[tuple[str, float]] = []
        self.loaded = threading.Event()
        self.info = None

    def load_progress(self, stage: str, fraction: float) -> None:
        self.progress.append((stage, fraction))

    def model_loaded(self, info) -> None:
        self.info = info
        self.loaded.set()

    def load_failed(self, message: str) -> None:
        self.info = message
        self.loaded.set()


def test_a_first_load_says_it_measures_as_soon_as_the_model_is_ready(tiny_model_folder, app_paths) -> None:
    """Calibration's first report comes right after "Model ready": it must not be dropped by the
    throttle, or the window shows a stage that is over for the whole measurement."""
    events = Events()
    thread = ModelThread(app_paths, events)
    try:
        thread.load(
            ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu", dtype="auto", quantization="none")
        )
        assert events.loaded.wait(300) and not isinstance(events.info, str), events.info
    finally:
        assert thread.shutdown(10)
    stages = [stage for stage, _ in events.progress]
    ready = stages.index("Model ready")
    assert events.progress[ready + 1] == (STAGE, 0.0)  # the very next report names the measurement
    assert events.progress[-1] == (STAGE, 1.0) and events.info.auto_reason.startswith("Auto: ")
