"""Puts the Compare page into the main window: a toolbar toggle and a page in the central stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAction

from app.compare.page import ComparePage

if TYPE_CHECKING:
    from app.window.main_window import MainWindow


class _StopOnClose(QObject):
    """Stops a running comparison when the window closes, before the worker is shut down."""

    def __init__(self, page: ComparePage, parent: QObject) -> None:
        super().__init__(parent)
        self.page = page

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Close:
            self.page.runner.stop()
        return False


def install_compare(window: MainWindow) -> ComparePage:
    """Add the Compare page and its toolbar toggle; it shares the window's model worker and settings.

    Comparisons run as jobs on the model worker's thread, so they never overlap a chat answer.
    """
    page = ComparePage(window.worker.run_job, window.paths, lambda: window.settings, lambda: window.chat.current_id)
    window.add_page(page)
    action = QAction(
        "Compare",
        window,
        checkable=True,
        objectName="compareAction",
        toolTip="Answer one prompt plain and with lookahead, side by side, and compare the speed",
    )
    action.toggled.connect(lambda on: window.pages.setCurrentWidget(page if on else window.chat_page))
    window.add_toolbar_action(action)
    window.installEventFilter(_StopOnClose(page, window))
    return page
