"""The Compare page's chart widgets: live tokens-over-time lines and the accepted-tokens histogram."""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QRectF, QSize, QTimer
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QWidget

from app.compare.charts import LOOKAHEAD_COLOR, ChartStyle, Series, paint_histogram, paint_timeline

LIVE_REPAINT_MS = (
    1000  # while streaming, repaint at most once a second: drawing competes with decoding for the CPU and the GIL
)


class TimelineView(QWidget):
    """Tokens generated against time, one line per run; runs can grow point by point while streaming."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._series: dict[str, Series] = {}
        self._repaint = QTimer(self, singleShot=True, interval=LIVE_REPAINT_MS)
        self._repaint.timeout.connect(self.update)
        self.setMinimumSize(QSize(320, 200))

    @property
    def series(self) -> list[Series]:
        return list(self._series.values())

    def set_series(self, series: list[Series]) -> None:
        self._series = {s.label: s for s in series}
        self.update()

    def start_line(self, key: str, label: str, color: str) -> None:
        """Begin (or restart) the line ``key`` at the origin."""
        self._series[key] = Series(label, color, [(0.0, 0.0)])
        self.update()

    def add_point(self, key: str, seconds: float, tokens: int) -> None:
        line = self._series[key]
        line.points.append((seconds, float(tokens)))
        if not self._repaint.isActive():
            self._repaint.start()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        paint_timeline(painter, QRectF(self.rect()), self.series, ChartStyle.from_palette(self.palette()))


class HistogramView(QWidget):
    """How many lookahead steps emitted 1, 2, ... N tokens."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.counts: dict[int, int] = {}
        self.setMinimumSize(QSize(240, 200))

    def set_counts(self, counts: Mapping[int, int]) -> None:
        self.counts = dict(counts)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        paint_histogram(
            painter, QRectF(self.rect()), self.counts, LOOKAHEAD_COLOR, ChartStyle.from_palette(self.palette())
        )
