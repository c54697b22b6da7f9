"""The status bar shows the plain figures it is given (the window reads them off the live answer)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import qasync

from app.chat.system_prompt import PREVIEW_LENGTH
from app.window.status_bar import FiguresBar
from core.autotune.calibration import Calibration
from core.autotune.curve import StepCostCurve
from core.autotune.predict import Estimate
from core.engine.answer_job import AnswerFigures
from core.lookahead.config import LookaheadConfig
from core.settings import ServerSettings


def test_live_figures_waiting_then_generating(qtbot) -> None:
    bar = FiguresBar()
    qtbot.addWidget(bar)
    bar.set_context(0, 8192)
    bar.show_live(False, None, None, None)  # queued behind other model work: nothing measured yet
    assert bar.state.text() == "waiting for the model"
    assert bar.rate.text() == "" and bar.step.text() == "" and bar.context.text() == "context 0 / 8192"
    bar.show_live(True, 41.66, 1.8, (812, 8192))
    assert bar.state.text() == "generating"
    assert bar.rate.text() == "41.7 tok/s" and bar.step.text() == "1.80 tokens/step"
    assert bar.context.text() == "context 812 / 8192"


def longest_auto_reason() -> str:
    """Auto's longest status line, as the calibration writes it: plain chosen, with every note."""
    best = Estimate(LookaheadConfig(15, 5, 15), tokens_per_step=2.1, fed_tokens=30, speedup=0.93)
    curve = StepCostCurve((1, 2, 4, 8, 16, 32), (0.01, 0.011, 0.013, 0.022, 0.041, 0.081))
    return Calibration(
        "cpu", "float32", curve, [best], 60.0, quantization="8bit", compiled=True, untried=("bf16",)
    ).reason


def test_long_texts_are_shortened_and_whole_in_the_tooltip(qtbot) -> None:
    bar = FiguresBar()
    qtbot.addWidget(bar)
    reason = longest_auto_reason()
    bar.auto.setText(reason)
    bar.resize(500, 30)
    bar.show()
    qtbot.waitExposed(bar)
    assert bar.auto.text() == reason and reason in bar.auto.toolTip()
    assert bar.auto.shown_text().endswith("…") and len(bar.auto.shown_text()) < len(reason) / 2
    assert bar.minimumSizeHint().width() < 500
    bar.resize(3000, 30)
    qtbot.waitUntil(lambda: bar.auto.shown_text() == reason)  # given the room, the whole text shows


def test_the_window_fits_a_1366_px_screen_with_the_longest_texts_and_the_server_on(
    qapp, open_window, tiny_settings
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prompt = "You are a senior software engineer. Answer in short, precise sentences, with code examples."
    tiny_settings(server=ServerSettings(enabled=True, port=port), system_prompt=prompt[:PREVIEW_LENGTH])
    loop = qasync.QEventLoop(qapp)  # the server runs on the window's qasync loop, as in the app
    asyncio.set_event_loop(loop)

    async def scenario() -> None:
        window = open_window(wait_for_model=False)
        while window.model is None or window.server.server is None:
            await asyncio.sleep(0.05)
        info = dataclasses.replace(
            window.model,
            device_label="NVIDIA RTX 6000 Ada Generation (12.3/48 GB)",
            device_kind="cuda",
            dtype="bf16",
            quantization="4bit",
            auto_reason=longest_auto_reason(),
        )
        window.figures.set_model(info)
        mode = "auto: W15 N5 G15 180, plain 20, W0 N5 G15 12, W7 N5 G7 4"
        window.figures.show_final(AnswerFigures(mode, 512, 200, 123.4, 2.56, 1800), info)
        await asyncio.sleep(0.1)
        assert window.server_indicator.isVisible() and window.server_indicator.text() == f"API 127.0.0.1:{port}"
        assert window.minimumSizeHint().width() <= 1000
        window.resize(1280, 740)
        await asyncio.sleep(0.1)
        assert window.width() == 1280
        assert window.figures.auto.shown_text().endswith("…")
        await window.server.stop()

    try:
        loop.run_until_complete(scenario())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_background_work_shows_its_progress_with_cancel_then_what_got_faster(qtbot) -> None:
    bar = FiguresBar()
    qtbot.addWidget(bar)
    bar.show()
    assert bar.background_bar.isHidden() and bar.background_cancel.isHidden() and bar.background.text() == ""
    bar.show_background("Measuring this machine for Auto in the background", 0.42)
    assert bar.background.text() == "42%" and "Measuring" in bar.background_bar.toolTip()
    assert bar.background_bar.value() == 420 and bar.background_bar.isVisible() and bar.background_cancel.isVisible()
    with qtbot.waitSignal(bar.cancel_background, timeout=1000):
        bar.background_cancel.click()
    bar.background_done("compiled step ready: 2.3x faster")
    assert bar.background.text() == "compiled step ready: 2.3x faster"
    assert bar.background_bar.isHidden() and bar.background_cancel.isHidden()
