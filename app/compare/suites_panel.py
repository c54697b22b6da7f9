"""The built-in benchmark suites, run from the window: a progress bar and the per-category table."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.bench.report import Row
from core.compare.suites import suite_lines

COLUMNS = ("Suite", "Plain tok/s", "Lookahead tok/s", "Speed-up", "Tokens/step", "Identical")


class SuitesPanel(QWidget):
    """Asks for a suite run (``run_requested(prompts per suite)``) and shows its progress and results."""

    run_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prompts = QSpinBox(minimum=1, maximum=50, value=3)
        self.prompts.setToolTip("How many prompts of each suite to run (more is slower, steadier).")
        self.run_button = QPushButton("Run built-in suites")
        self.run_button.clicked.connect(lambda: self.run_requested.emit(self.prompts.value()))
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.stage = QLabel("Plain loop against lookahead on the code, chat and math suites.")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Prompts per suite"))
        controls.addWidget(self.prompts)
        controls.addWidget(self.run_button)
        controls.addWidget(self.progress, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.stage)
        layout.addWidget(self.table, 1)

    def set_ready(self, ready: bool) -> None:
        self.run_button.setEnabled(ready)

    def begin(self) -> None:
        self.progress.setValue(0)
        self.stage.setText("Warming up\u2026")

    def report(self, stage: str, fraction: float) -> None:
        self.progress.setValue(round(fraction * 1000))
        self.progress.setFormat(f"{stage} \u00b7 %p%")
        self.stage.setText(stage)

    def show_rows(self, rows: Sequence[Row]) -> None:
        lines = suite_lines(rows)
        self.table.setRowCount(len(lines))
        for r, line in enumerate(lines):
            cells = (
                line.suite,
                f"{line.plain_tokens_per_second:.1f}",
                f"{line.lookahead_tokens_per_second:.1f}",
                f"{line.speedup:.2f}x" if line.speedup is not None else "-",
                f"{line.tokens_per_step:.2f}",
                f"{line.identical}/{line.runs}",
            )
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(r, c, item)
        self.stage.setText("Done." if lines else "Stopped before any suite finished.")
