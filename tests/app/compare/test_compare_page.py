"""The Compare page end to end on the tiny model (offscreen): run, summary, export, history, stop, suites."""

from __future__ import annotations

import json

import pytest

from app.compare.charts import save_bench_chart
from app.compare.page import ComparePage
from app.compare.runner import thread_call
from app.settings.live import LiveSettings
from core.compare import LOOKAHEAD, PLAIN
from core.settings import LookaheadSettings, SamplingSettings, Settings

SETTINGS = Settings(
    lookahead=LookaheadSettings(auto=False, window=3, ngram=3, guesses=3), sampling=SamplingSettings(max_new_tokens=16)
)


@pytest.fixture
def page(qtbot, tiny_ready, app_paths):
    page = ComparePage(thread_call(tiny_ready), app_paths, LiveSettings(SETTINGS), lambda: 7)
    page.resize(1200, 800)
    qtbot.addWidget(page)
    page.show()
    return page


def test_a_comparison_runs_to_the_end_and_exports_both_runs_steps(qtbot, page, tmp_path):
    page.prompt.setPlainText("def add(a, b):\n    return a + b\n\nWrite a test for add.")
    page.repeats.setValue(2)
    with qtbot.waitSignal(page.runner.compared, timeout=120_000):
        page.compare_button.click()
    qtbot.waitUntil(lambda: not page.runner.busy)
    summary = page.summary.text()
    assert "Plain: " in summary and "Lookahead W3 N3 G3: " in summary
    assert summary.count("tok/s") == 2 and "median of 2" in summary
    assert "\u2713 identical" in summary and "DIFFERENT" not in summary
    assert page.plain_pane.text.toPlainText() == page.lookahead_pane.text.toPlainText()
    assert "tok/s" in page.plain_pane.rate.text() and "tok/s" in page.lookahead_pane.rate.text()
    assert [s.label.split()[0] for s in page.timeline.series] == ["plain", "lookahead"]
    assert sum(page.histogram.counts.values()) > 0

    page.export_to(tmp_path / "cmp.json", "json")
    page.export_to(tmp_path / "cmp.csv", "csv")
    page.export_to(tmp_path / "cmp.png", "png")
    data = json.loads((tmp_path / "cmp.json").read_text())
    assert [(r["repeat"], r["mode"]) for r in data["runs"]] == [(0, PLAIN), (0, LOOKAHEAD), (1, LOOKAHEAD), (1, PLAIN)]
    for run in data["runs"]:
        assert len(run["step_seconds"]) == len(run["step_tokens"]) == run["steps"] > 0
        assert sum(run["step_tokens"]) == run["new_tokens"] and all(s > 0 for s in run["step_seconds"])
    assert data["summary"]["identical"] is True
    assert len((tmp_path / "cmp.csv").read_text().splitlines()) == 1 + sum(r["steps"] for r in data["runs"])
    assert (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert page.history.count() == 1 and "x \u00b7 def add" in page.history.itemText(0)
    page.summary.clear()
    page._on_history(0)
    assert "\u2713 identical" in page.summary.text()


def test_stop_ends_the_comparison_early(qtbot, page):
    page.max_tokens.setValue(400)
    page.repeats.setValue(3)
    with qtbot.waitSignal(page.runner.compared, timeout=120_000) as blocker:
        page.compare_button.click()
        qtbot.waitUntil(lambda: page.plain_pane.text.toPlainText() != "", timeout=60_000)
        page.stop_button.click()
    comparison = blocker.args[0]
    assert comparison.cancelled and len(comparison.runs) < 6
    qtbot.waitUntil(lambda: page.compare_button.isEnabled())
    assert page.status.text() == "Stopped."


def test_suites_run_from_the_page_fill_the_table(qtbot, page):
    page.max_tokens.setValue(8)
    page.suites.prompts.setValue(1)
    with qtbot.waitSignal(page.runner.suites_done, timeout=120_000):
        page.suites.run_button.click()
    table = page.suites.table
    assert [table.item(r, 0).text() for r in range(table.rowCount())] == ["code", "chat", "math"]
    assert all(table.item(r, 5).text() == "1/1" for r in range(3))
    assert page.suites.progress.value() == 1000


def test_stop_of_a_comparison_queued_behind_other_work_returns_the_page_to_idle(qtbot, app_paths, tiny_ready):
    queued = []  # a model thread busy elsewhere: the job waits here
    page = ComparePage(queued.append, app_paths, LiveSettings(SETTINGS))
    qtbot.addWidget(page)
    page.start()
    assert page.runner.busy and not page.compare_button.isEnabled()
    page.stop_button.click()
    assert not page.runner.busy and page.compare_button.isEnabled() and page.status.text() == "Stopped."
    compared = []
    page.runner.compared.connect(compared.append)
    assert queued[0].run(tiny_ready) == "aborted"  # reached later, the job is skipped without a step
    qtbot.wait(50)
    assert compared == [] and page.comparison is None and not page.runner.busy


@pytest.mark.parametrize(("dtype", "cause"), [("float32", "a bug"), ("bfloat16", "bfloat16 rounding")])
def test_a_difference_is_shown_as_an_error(qtbot, app_paths, dtype, cause):
    from core.compare import Comparison, RunRecord

    runs = [
        RunRecord(PLAIN, 0, 0, [5, 6, 7], "a", "length", [0.1, 0.1, 0.1], [1, 1, 1]),
        RunRecord(LOOKAHEAD, 0, 1, [5, 6, 8], "b", "length", [0.1, 0.1], [1, 2]),
    ]
    page = ComparePage(None, app_paths, LiveSettings(SETTINGS))
    qtbot.addWidget(page)
    page.show_comparison(
        Comparison("x", "2025-01-01T00:00:00", "p", "", "m", "CPU", dtype, "W3 N3 G3", 3, 1, runs=runs)
    )
    assert f"\u2717 DIFFERENT from token 2: {cause}" in page.summary.text()
    assert "#d93025" in page.summary.output.value.styleSheet()
    assert page.compare_button.isEnabled() is False and page.status.text() == "Load a model to compare."


def _tallest_run(image, color: str) -> int:
    """The tallest vertical run of ``color`` pixels in any column (a bar's height; legend swatches are short)."""
    import numpy as np
    from PySide6.QtGui import QColor, QImage

    image = image.convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(image.constBits(), dtype=np.uint32).reshape(image.height(), image.bytesPerLine() // 4)
    match = (pixels[:, : image.width()] & 0xFFFFFF) == (QColor(color).rgb() & 0xFFFFFF)
    best = 0
    run = np.zeros(image.width(), dtype=np.int64)
    for row in match:
        run = np.where(row, run + 1, 0)
        best = max(best, int(run.max()))
    return best


def test_bench_chart_png_draws_bars_in_proportion(qtbot, tmp_path):
    from PySide6.QtGui import QImage

    from app.compare.charts import LOOKAHEAD_COLOR
    from core.bench.report import Row

    generate_grey = "#b0b7bf"
    rows = [
        Row("code", "generate", 1, 10, 1.0, 10, 1, 1.0, 0.9),
        Row("code", "lookahead W3 N3 G3", 1, 10, 0.5, 5, 1, 2.0, 1.8),
    ]
    heights = {}
    for metric in ("speedup", "speedup_vs_loop", "tokens_per_second"):
        save_bench_chart(rows, tmp_path / f"{metric}.png", metric)
        image = QImage(str(tmp_path / f"{metric}.png"))
        assert image.width() * 420 == image.height() * 640 and image.width() >= 640
        heights[metric] = (_tallest_run(image, generate_grey), _tallest_run(image, LOOKAHEAD_COLOR))
    # Against model.generate only the lookahead bar is drawn; elsewhere both, lookahead twice as tall (2x the rate).
    assert heights["speedup"][0] < 20 < heights["speedup"][1]
    for metric in ("speedup_vs_loop", "tokens_per_second"):
        grey, orange = heights[metric]
        assert 1.8 < orange / grey < 2.2, (metric, heights)
    with pytest.raises(ValueError):
        save_bench_chart(rows, tmp_path / "x.png", "steps")
