"""Start the GUI."""

from __future__ import annotations

import sys

from core.paths import AppPaths


def run_gui(paths: AppPaths) -> int:
    """Show the main window and run the Qt event loop under qasync until it closes."""
    from PySide6.QtWidgets import QApplication, QLabel

    app = QApplication.instance() or QApplication(sys.argv)
    label = QLabel("Lookahead Chat")
    label.resize(640, 400)
    label.show()
    return app.exec()
