"""Light and dark themes: a Fusion palette plus a style sheet from resources/themes."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from core.paths import resource_path

log = logging.getLogger(__name__)

_DARK_COLORS = {
    QPalette.ColorRole.Window: "#1f2128",
    QPalette.ColorRole.WindowText: "#e5e7eb",
    QPalette.ColorRole.Base: "#171920",
    QPalette.ColorRole.AlternateBase: "#23262f",
    QPalette.ColorRole.Text: "#e5e7eb",
    QPalette.ColorRole.Button: "#2a2d37",
    QPalette.ColorRole.ButtonText: "#e5e7eb",
    QPalette.ColorRole.Highlight: "#3b82f6",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#2a2d37",
    QPalette.ColorRole.ToolTipText: "#e5e7eb",
    QPalette.ColorRole.PlaceholderText: "#8b8f9a",
    QPalette.ColorRole.Link: "#7aa2f7",
}


def is_dark(theme: str) -> bool:
    """Whether ``theme`` (system, light or dark) means dark now."""
    if theme == "system":
        return QApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark
    return theme == "dark"


def apply_theme(app: QApplication, theme: str) -> bool:
    """Style the whole application; returns True when the result is dark."""
    dark = is_dark(theme)
    app.setStyle("Fusion")
    palette = app.style().standardPalette()
    if dark:
        for role, color in _DARK_COLORS.items():
            palette.setColor(role, QColor(color))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#6b7280"))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#6b7280"))
    app.setPalette(palette)
    sheet = resource_path("themes", "dark.qss" if dark else "light.qss")
    try:
        app.setStyleSheet(sheet.read_text(encoding="utf-8"))
    except OSError as err:
        log.warning("theme style sheet %s unreadable: %s", sheet, err)
        app.setStyleSheet("")
    return dark
