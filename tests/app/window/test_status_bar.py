"""The status bar shows the plain figures it is given (the window reads them off the live answer)."""

from __future__ import annotations

from app.window.status_bar import FiguresBar


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
