"""Compare mode inside the main window: the toolbar toggle and a run through the model worker."""

from __future__ import annotations

from PySide6.QtGui import QAction


def test_compare_toggle_runs_on_the_window_model(qtbot, tiny_settings, open_window):
    tiny_settings(max_new_tokens=12)
    window = open_window()
    page = window.compare_page
    action = window.findChild(QAction, "compareAction")
    action.trigger()
    assert window.pages.currentWidget() is page
    with qtbot.waitSignal(page.runner.compared, timeout=120_000):
        page.compare_button.click()
    assert "\u2713 identical" in page.summary.text()
    action.trigger()
    assert window.pages.currentWidget() is window.chat_page
