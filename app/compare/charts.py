"""Charts drawn with QPainter: tokens over time, accepted tokens per step, benchmark bars.

The paint functions draw into any rectangle of any QPainter, so the Compare page's widgets and the
off-screen PNG exports (including ``lookahead-chat bench``'s chart) share one drawing code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QGuiApplication, QImage, QPainter, QPainterPath, QPalette, QPen

from core.bench.report import Row
from core.bench.runner import PLAIN_LOOP, REFERENCE
from core.compare import LOOKAHEAD, Comparison

PLAIN_COLOR = "#7b8794"
LOOKAHEAD_COLOR = "#e8710a"
OTHER_COLORS = ("#1a73e8", "#188038", "#9334e6", "#d93025", "#12b5cb")
MARGIN = 12.0


@dataclass(frozen=True)
class ChartStyle:
    """Colours of a chart: light for files, the widget palette's on screen."""

    background: QColor
    text: QColor
    muted: QColor
    grid: QColor

    @classmethod
    def light(cls) -> ChartStyle:
        return cls(QColor("#ffffff"), QColor("#202124"), QColor("#5f6368"), QColor("#e3e5e8"))

    @classmethod
    def from_palette(cls, palette: QPalette) -> ChartStyle:
        text = palette.color(QPalette.ColorRole.Text)
        base = palette.color(QPalette.ColorRole.Base)
        muted = QColor(text)
        muted.setAlphaF(0.65)
        grid = QColor(text)
        grid.setAlphaF(0.12)
        return cls(base, text, muted, grid)


@dataclass(frozen=True)
class Series:
    """A line of the timeline: (seconds, tokens) points and its legend."""

    label: str
    color: str
    points: list[tuple[float, float]]


@dataclass(frozen=True)
class BarGroup:
    """One method across the categories of a bar chart."""

    label: str
    color: str
    values: Sequence[float | None]


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (about ``count`` of them)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _font(painter: QPainter, size: float, bold: bool = False) -> QFontMetricsF:
    font = QFont(painter.font())
    font.setPointSizeF(size)
    font.setBold(bold)
    painter.setFont(font)
    return QFontMetricsF(font)


def _frame(
    painter: QPainter,
    rect: QRectF,
    style: ChartStyle,
    title: str,
    x_ticks: list[float] | None,
    y_ticks: list[float],
    x_name: str,
    y_name: str,
) -> QRectF:
    """Background, title, grid, tick labels and axis names; returns the plot area.

    ``x_ticks`` ``None``: the caller labels the x axis itself (bars).
    """
    painter.fillRect(rect, style.background)
    metrics = _font(painter, 10, bold=True)
    painter.setPen(style.text)
    painter.drawText(
        QRectF(rect.left() + MARGIN, rect.top() + 6, rect.width() - 2 * MARGIN, metrics.height()),
        Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
        title,
    )
    top = rect.top() + 10 + metrics.height() * 1.6
    metrics = _font(painter, 8.5)
    y_width = max(metrics.horizontalAdvance(_label(v)) for v in y_ticks) + 8
    left = rect.left() + MARGIN + metrics.height() + y_width
    bottom = rect.bottom() - MARGIN - 2 * metrics.height() - 4
    plot = QRectF(left, top, rect.right() - MARGIN - 6 - left, bottom - top)
    painter.setPen(QPen(style.grid, 1))
    for v in y_ticks:
        y = plot.bottom() - plot.height() * v / y_ticks[-1]
        painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
    painter.setPen(style.muted)
    for v in y_ticks:
        y = plot.bottom() - plot.height() * v / y_ticks[-1]
        painter.drawText(
            QRectF(plot.left() - y_width - 4, y - 8, y_width, 16),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
            _label(v),
        )
    for v in x_ticks or ():
        x = plot.left() + plot.width() * v / x_ticks[-1]
        painter.drawText(
            QRectF(x - 30, plot.bottom() + 3, 60, metrics.height()), Qt.AlignmentFlag.AlignHCenter, _label(v)
        )
    painter.drawText(
        QRectF(plot.left(), plot.bottom() + 3 + metrics.height(), plot.width(), metrics.height() + 2),
        Qt.AlignmentFlag.AlignHCenter,
        x_name,
    )
    painter.save()
    painter.translate(rect.left() + MARGIN, plot.center().y())
    painter.rotate(-90)
    painter.drawText(
        QRectF(-plot.height() / 2, -2, plot.height(), metrics.height() + 2), Qt.AlignmentFlag.AlignHCenter, y_name
    )
    painter.restore()
    return plot


def paint_timeline(
    painter: QPainter,
    rect: QRectF,
    series: Sequence[Series],
    style: ChartStyle,
    title: str = "Tokens generated over time",
) -> None:
    """Cumulative tokens against seconds, one stair line per series, legend at the top left."""
    max_x = max((p[0] for s in series for p in s.points), default=0.0)
    max_y = max((p[1] for s in series for p in s.points), default=0.0)
    x_ticks, y_ticks = nice_ticks(max_x or 1.0), nice_ticks(max_y or 10.0)
    plot = _frame(painter, rect, style, title, x_ticks, y_ticks, "seconds", "tokens")
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)

    def at(x: float, y: float) -> QPointF:
        return QPointF(plot.left() + plot.width() * x / x_ticks[-1], plot.bottom() - plot.height() * y / y_ticks[-1])

    for s in series:
        if not s.points:
            continue
        path = QPainterPath(at(*s.points[0]))
        for (_, y0), (x1, y1) in zip(s.points, s.points[1:]):
            path.lineTo(at(x1, y0))
            path.lineTo(at(x1, y1))
        painter.setPen(QPen(QColor(s.color), 2.2))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(path)
    metrics = _font(painter, 9)
    y = plot.top() + 6
    for s in series:
        painter.fillRect(QRectF(plot.left() + 10, y + metrics.height() / 2 - 2, 16, 4), QColor(s.color))
        painter.setPen(style.text)
        painter.drawText(QPointF(plot.left() + 32, y + metrics.ascent()), s.label)
        y += metrics.height() + 4


def paint_histogram(
    painter: QPainter,
    rect: QRectF,
    counts: Mapping[int, int],
    color: str,
    style: ChartStyle,
    title: str = "Accepted tokens per lookahead step",
) -> None:
    """One bar per tokens-per-step value (1 .. the largest seen), its count above it."""
    top_k = max(counts, default=1)
    keys = list(range(1, max(top_k, 1) + 1))
    y_ticks = nice_ticks(max(counts.values(), default=0) or 1)
    plot = _frame(painter, rect, style, title, None, y_ticks, "tokens emitted in the step", "steps")
    slot = plot.width() / len(keys)
    metrics = _font(painter, 8.5)
    for i, k in enumerate(keys):
        n = counts.get(k, 0)
        height = plot.height() * n / y_ticks[-1]
        bar = QRectF(plot.left() + slot * (i + 0.18), plot.bottom() - height, slot * 0.64, height)
        painter.fillRect(bar, QColor(color))
        painter.setPen(style.text)
        if n:
            painter.drawText(
                QRectF(bar.left() - 10, bar.top() - metrics.height() - 1, bar.width() + 20, metrics.height()),
                Qt.AlignmentFlag.AlignHCenter,
                str(n),
            )
        painter.setPen(style.muted)
        painter.drawText(
            QRectF(plot.left() + slot * i, plot.bottom() + 3, slot, metrics.height()),
            Qt.AlignmentFlag.AlignHCenter,
            str(k),
        )


def paint_bars(
    painter: QPainter,
    rect: QRectF,
    categories: Sequence[str],
    groups: Sequence[BarGroup],
    style: ChartStyle,
    title: str,
    y_name: str,
    baseline: float | None = None,
) -> None:
    """Grouped bars: one group per category, one bar per method, values above; optional dashed baseline."""
    values = [v for g in groups for v in g.values if v is not None]
    y_ticks = nice_ticks(max(values + [baseline or 0.0], default=1.0) * 1.1)
    plot = _frame(painter, rect, style, title, None, y_ticks, "", y_name)
    metrics = _font(painter, 8.5)
    slot = plot.width() / max(len(categories), 1)
    width = slot * 0.8 / max(len(groups), 1)
    for c, category in enumerate(categories):
        for g, group in enumerate(groups):
            value = group.values[c]
            if value is None:
                continue
            height = plot.height() * value / y_ticks[-1]
            bar = QRectF(plot.left() + slot * (c + 0.1) + width * g + 1, plot.bottom() - height, width - 2, height)
            painter.fillRect(bar, QColor(group.color))
            painter.setPen(style.text)
            painter.drawText(
                QRectF(bar.left() - 8, bar.top() - metrics.height() - 1, bar.width() + 16, metrics.height()),
                Qt.AlignmentFlag.AlignHCenter,
                f"{value:.2f}" if value < 10 else f"{value:.0f}",
            )
        painter.setPen(style.text)
        painter.drawText(
            QRectF(plot.left() + slot * c, plot.bottom() + 4, slot, metrics.height()),
            Qt.AlignmentFlag.AlignHCenter,
            category,
        )
    if baseline is not None:
        y = plot.bottom() - plot.height() * baseline / y_ticks[-1]
        painter.setPen(QPen(style.muted, 1.2, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
    x = plot.left()
    y = rect.bottom() - MARGIN - metrics.height()
    for group in groups:
        painter.fillRect(QRectF(x, y + 3, 12, metrics.height() - 6), QColor(group.color))
        painter.setPen(style.text)
        painter.drawText(QPointF(x + 16, y + metrics.ascent()), group.label)
        x += 16 + metrics.horizontalAdvance(group.label) + 18


def comparison_series(comparison: Comparison) -> list[Series]:
    """The timeline series of the last repeat where both runs finished."""
    pairs = comparison.pairs()
    if not pairs:
        return []
    plain, ahead = pairs[-1]
    return [
        Series(f"plain  {plain.stats.tokens_per_second:.1f} tok/s", PLAIN_COLOR, plain.timeline()),
        Series(
            f"lookahead {comparison.lookahead}  {ahead.stats.tokens_per_second:.1f} tok/s",
            LOOKAHEAD_COLOR,
            ahead.timeline(),
        ),
    ]


def comparison_histogram(comparison: Comparison) -> dict[int, int]:
    """Accepted tokens per step of the last finished lookahead run."""
    runs = comparison.runs_of(LOOKAHEAD)
    return dict(runs[-1].stats.accepted_histogram) if runs else {}


def render_png(path: Path, width: int, height: int, paint: Callable[[QPainter, QRectF], None]) -> None:
    """Draw off-screen into a ``width`` x ``height`` PNG (at 2x pixel density for crisp text)."""
    app = _gui_application()  # noqa: F841 (kept alive while painting)
    image = QImage(width * 2, height * 2, QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(2.0)
    image.fill(QColor("#ffffff"))
    painter = QPainter(image)
    try:
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
        paint(painter, QRectF(0, 0, width, height))
    finally:
        painter.end()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(path), "PNG"):
        raise OSError(f"Could not write the chart to {path}. Check that the folder is writable.")


def save_comparison_chart(comparison: Comparison, path: Path) -> None:
    """The timeline and the accepted-tokens histogram side by side, as a PNG."""
    style = ChartStyle.light()

    def paint(painter: QPainter, rect: QRectF) -> None:
        left = QRectF(rect.left(), rect.top(), rect.width() * 0.6, rect.height())
        right = QRectF(left.right(), rect.top(), rect.width() - left.width(), rect.height())
        paint_timeline(painter, left, comparison_series(comparison), style)
        paint_histogram(painter, right, comparison_histogram(comparison), LOOKAHEAD_COLOR, style)

    render_png(path, 1100, 420, paint)


BENCH_METRICS = {
    # metric: (title, y axis, dashed baseline, the method it is measured against)
    "speedup": ("Speed-up over model.generate per suite", "speed-up", 1.0, REFERENCE),
    "speedup_vs_loop": ("Speed-up over the plain decoding loop per suite", "speed-up", 1.0, PLAIN_LOOP),
    "tokens_per_second": ("Tokens per second per suite", "tokens/s", None, None),
}


def save_bench_chart(rows: Sequence[Row], path: Path, metric: str = "speedup") -> None:
    """A per-suite bar chart of benchmark rows as a PNG.

    Args:
        rows: ``core.bench.report.summarize`` output.
        path: the PNG to write.
        metric: a key of :data:`BENCH_METRICS`: ``speedup`` (over ``model.generate``),
            ``speedup_vs_loop`` (over the plain loop) or ``tokens_per_second``.
    """
    if metric not in BENCH_METRICS:
        raise ValueError(f"metric must be one of {', '.join(BENCH_METRICS)} (got {metric!r}).")
    title, y_name, baseline, against = BENCH_METRICS[metric]
    suites = list(dict.fromkeys(r.suite for r in rows))
    methods = list(dict.fromkeys(r.method for r in rows if r.method != against))
    by_key = {(r.suite, r.method): r for r in rows}
    groups = []
    for method, color in zip(methods, _method_colors(methods)):
        cells = [by_key.get((suite, method)) for suite in suites]
        groups.append(BarGroup(method, color, [None if row is None else getattr(row, metric) for row in cells]))
    width = max(640, 140 + 70 * len(suites) * max(len(groups), 1))
    render_png(
        path, width, 420, lambda p, r: paint_bars(p, r, suites, groups, ChartStyle.light(), title, y_name, baseline)
    )


def _method_colors(methods: Sequence[str]) -> list[str]:
    """The reference light grey, plain grey and the first lookahead orange (as on the Compare page); others in turn."""
    colors: list[str] = []
    others = iter(OTHER_COLORS * len(methods))
    for method in methods:
        if method == REFERENCE:
            color = "#b0b7bf"
        elif method.startswith("plain") and PLAIN_COLOR not in colors:
            color = PLAIN_COLOR
        elif method.startswith("lookahead") and LOOKAHEAD_COLOR not in colors:
            color = LOOKAHEAD_COLOR
        else:
            color = next(others)
        colors.append(color)
    return colors


def _gui_application() -> QGuiApplication:
    """Painting text needs a QGuiApplication; from the command line, start an off-screen one."""
    app = QGuiApplication.instance()
    if app is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QGuiApplication([])
    return app


__all__ = [
    "LOOKAHEAD_COLOR",
    "PLAIN_COLOR",
    "BarGroup",
    "ChartStyle",
    "Series",
    "comparison_histogram",
    "comparison_series",
    "nice_ticks",
    "paint_bars",
    "paint_histogram",
    "paint_timeline",
    "BENCH_METRICS",
    "render_png",
    "save_bench_chart",
    "save_comparison_chart",
]
