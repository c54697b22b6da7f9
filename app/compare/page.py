"""The Compare page: one prompt, plain and lookahead side by side, summary, charts, suites, export, history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.compare.chart_views import HistogramView, TimelineView
from app.compare.charts import (
    LOOKAHEAD_COLOR,
    PLAIN_COLOR,
    comparison_histogram,
    comparison_series,
    save_comparison_chart,
)
from app.compare.panes import RunPane
from app.compare.runner import CompareRunner, ModelCall
from app.compare.suites_panel import SuitesPanel
from app.compare.summary_strip import ERROR_COLOR, SummaryStrip
from app.settings.live import LiveSettings
from core.compare import LOOKAHEAD, PLAIN, Comparison, RunDone, RunStarted, RunStep, summarize
from core.compare.export import export_csv, export_json
from core.compare.remote_run import LOCAL, REMOTE, local_remote_summary
from core.compare.store import ComparisonStore
from core.engine.jobs import JobFailure
from core.paths import AppPaths

EXAMPLE_PROMPT = "Write a Python function that checks whether a number is prime."


class ComparePage(QWidget):
    """Self-contained: give it a :data:`~app.compare.runner.ModelCall` and the settings in use.

    Args:
        call: runs a job with the loaded model off the GUI thread (``None`` while none is loaded).
        paths: the app's folders (comparisons are kept under ``data_dir``).
        settings: the settings in use, read at each run (lookahead parameters, system prompt, max tokens).
        conversation: returns the current conversation's id; comparisons are kept with it.

    ``busy_changed`` tells the window when a comparison or suite run holds the model.
    """

    busy_changed = Signal(bool)

    def __init__(
        self,
        call: ModelCall | None,
        paths: AppPaths,
        settings: LiveSettings,
        conversation: Callable[[], str | int | None] = lambda: None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.settings = settings
        self.conversation = conversation
        self.store = ComparisonStore(paths.data_dir)
        self.comparison: Comparison | None = None
        self.runner = CompareRunner(call, paths, self)
        self._steps: dict[str, int] = {}
        self._build()
        self.runner.events.connect(self._on_events)
        self.runner.compared.connect(self._on_compared)
        self.runner.failed.connect(self._on_failed)
        self.runner.suite_progress.connect(self.suites.report)
        self.runner.suites_done.connect(self.suites.show_rows)
        self.runner.busy_changed.connect(self._on_busy)
        self.runner.busy_changed.connect(self.busy_changed)
        self._on_busy(False)

    # --- building -------------------------------------------------------------------------------

    def _build(self) -> None:
        self.prompt = QPlainTextEdit(EXAMPLE_PROMPT)
        self.prompt.setPlaceholderText("A prompt to answer both ways")
        self.prompt.setFixedHeight(64)
        self.max_tokens = QSpinBox(
            minimum=8, maximum=4096, value=min(self.settings.current.sampling.max_new_tokens, 256)
        )
        self.repeats = QSpinBox(minimum=1, maximum=50, value=1)
        self.repeats.setToolTip("Repeats alternate which mode goes first; the summary shows medians and spread.")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setDefault(True)
        self.compare_button.clicked.connect(self.start)
        self.against_remote = QCheckBox("Local against remote (the remote source of Settings, Model)")
        self.against_remote.setToolTip(
            "Answer the prompt with the local model (in the toolbar's mode), then with the remote source of "
            "Settings, Model, and show both rates"
        )
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.history = QComboBox()
        self.history.setMinimumWidth(260)
        self.history.setToolTip("Comparisons kept with this conversation")
        self.history.activated.connect(self._on_history)
        self.export_button = QToolButton(text="Export")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.export_button)
        menu.addAction("Comparison as JSON\u2026", lambda: self._export("json", "JSON (*.json)"))
        menu.addAction("Comparison as CSV\u2026", lambda: self._export("csv", "CSV (*.csv)"))
        menu.addAction("Chart as PNG\u2026", lambda: self._export("png", "PNG image (*.png)"))
        self.export_button.setMenu(menu)
        controls = QHBoxLayout()
        for widget in (
            QLabel("Max new tokens"),
            self.max_tokens,
            QLabel("Repeats"),
            self.repeats,
            self.compare_button,
            self.stop_button,
        ):
            controls.addWidget(widget)
        controls.addStretch(1)
        controls.addWidget(QLabel("Earlier"))
        controls.addWidget(self.history)
        controls.addWidget(self.export_button)

        self.plain_pane = RunPane("Plain", PLAIN_COLOR)
        self.lookahead_pane = RunPane("Lookahead", LOOKAHEAD_COLOR)
        panes = QSplitter(Qt.Orientation.Horizontal)
        panes.addWidget(self.plain_pane)
        panes.addWidget(self.lookahead_pane)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.summary = SummaryStrip()
        self.timeline = TimelineView()
        self.histogram = HistogramView()
        charts = QSplitter(Qt.Orientation.Horizontal)
        charts.addWidget(self.timeline)
        charts.addWidget(self.histogram)
        charts.setSizes([600, 400])
        self.suites = SuitesPanel()
        self.suites.run_requested.connect(self.run_suites)
        self.tabs = QTabWidget()
        self.tabs.addTab(charts, "Charts")
        self.tabs.addTab(self.suites, "Benchmark suites")
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(panes)
        body.addWidget(self.tabs)
        body.setSizes([300, 300])

        layout = QVBoxLayout(self)
        layout.addWidget(self.prompt)
        layout.addWidget(
            self.against_remote
        )  # a line of its own: the controls' row is as wide as a 1366 px screen allows
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addWidget(self.summary)
        layout.addWidget(body, 1)

    # --- the conversation on show ---------------------------------------------------------------

    @property
    def conversation_id(self) -> str | None:
        current = self.conversation()
        return None if current is None else str(current)

    def showEvent(self, event: QShowEvent) -> None:
        """Coming back to the page: list the current conversation's comparisons."""
        super().showEvent(event)
        if not self.runner.busy:
            self._refresh_history()

    # --- actions --------------------------------------------------------------------------------

    def start(self) -> None:
        """Compare the prompt both ways."""
        prompt = self.prompt.toPlainText().strip()
        if not prompt:
            self._show_status("Type a prompt to compare.", error=True)
            return
        self.comparison = None
        self.summary.clear()
        self.timeline.set_series([])
        self.histogram.set_counts({})
        if self.against_remote.isChecked():
            self._start_remote(prompt)
            return
        self.plain_pane.set_title("Plain")
        self._show_status("Warming up\u2026")
        self.runner.compare(
            prompt, self.settings.current, self.max_tokens.value(), self.repeats.value(), self.conversation_id
        )

    def _start_remote(self, prompt: str) -> None:
        remote = self.settings.current.remote.source()
        if remote is None:
            self._show_status("Turn on a remote source first: Settings, Model, Remote.", error=True)
            return
        self.plain_pane.set_title(f"Local ({self.settings.current.mode})")
        self.lookahead_pane.set_title(f"Remote: {remote.model} at {remote.host}")
        self._show_status("Answering locally, then remotely\u2026")
        self.runner.compare_remote(prompt, self.settings.current, self.max_tokens.value())

    def stop(self) -> None:
        """Stop the comparison or suite run (within one decoding step; at once if it has not begun)."""
        self.runner.stop()
        if not self.runner.busy:
            self._show_status("Stopped.")

    def run_suites(self, prompts_per_suite: int) -> None:
        self.suites.begin()
        self._show_status("Running the built-in suites\u2026")
        self.runner.run_suites(self.settings.current, self.max_tokens.value(), prompts_per_suite)

    def export_to(self, path: Path, kind: str) -> None:
        """Export the shown comparison: ``kind`` is json, csv or png."""
        if self.comparison is None:
            raise ValueError("There is no comparison to export yet.")
        writer = {"json": export_json, "csv": export_csv, "png": save_comparison_chart}[kind]
        writer(self.comparison, path)

    # --- runner events --------------------------------------------------------------------------

    def _pane(self, mode: str) -> RunPane:
        return self.plain_pane if mode in (PLAIN, LOCAL) else self.lookahead_pane

    def _on_events(self, events: list[object]) -> None:
        for event in events:
            if isinstance(event, RunStarted):
                self._steps[event.mode] = 0
                total = self.repeats.value()
                note = f"repeat {event.repeat + 1}/{total} \u00b7 running" if total > 1 else "running"
                self._pane(event.mode).begin(note)
                color = PLAIN_COLOR if event.mode in (PLAIN, LOCAL) else LOOKAHEAD_COLOR
                self.timeline.start_line(event.mode, event.mode, color)
                self._show_status(f"Repeat {event.repeat + 1} of {total}: {event.mode}\u2026")
            elif isinstance(event, RunStep):
                if event.tokens:
                    self._steps[event.mode] = self._steps.get(event.mode, 0) + 1
                    self.timeline.add_point(event.mode, event.elapsed, event.new_tokens)
                pane = self._pane(event.mode)
                pane.append(event.text)
                pane.show_rate(event.new_tokens, event.elapsed, self._steps.get(event.mode, 0))
            elif isinstance(event, RunDone):
                stats = event.record.stats
                self._pane(event.record.mode).show_rate(stats.new_tokens, stats.total_seconds, stats.steps)
                if event.record.mode == LOOKAHEAD:
                    self.histogram.set_counts(stats.accepted_histogram)

    def _on_compared(self, comparison: Comparison) -> None:
        if comparison.runs_of(LOCAL) or comparison.runs_of(REMOTE):
            self._show_status(("Stopped. " if comparison.cancelled else "") + local_remote_summary(comparison))
            return
        self.show_comparison(comparison)
        if comparison.pairs():
            try:
                self.store.save(comparison)
            except OSError as err:
                self._show_status(f"The comparison could not be saved ({err}). Check the disk space.", error=True)
                return
            self._refresh_history()
        self._show_status("Stopped." if comparison.cancelled else "Done.")

    def show_comparison(self, comparison: Comparison) -> None:
        """Show a finished or stored comparison: last repeat's answers, summary and charts."""
        self.comparison = comparison
        self.lookahead_pane.set_title(f"Lookahead {comparison.lookahead}")
        pairs = comparison.pairs()
        if pairs:
            for run in pairs[-1]:
                pane = self._pane(run.mode)
                pane.begin("")
                pane.append(run.text)
                stats = run.stats
                pane.show_rate(stats.new_tokens, stats.total_seconds, stats.steps)
        self.summary.show_summary(summarize(comparison), comparison.lookahead, comparison.dtype)
        if pairs:
            self.timeline.set_series(comparison_series(comparison))
            self.histogram.set_counts(comparison_histogram(comparison))
        self.export_button.setEnabled(not self.runner.busy)

    def _on_failed(self, failure: JobFailure) -> None:
        self._show_status(failure.message, error=True)

    def _on_busy(self, busy: bool) -> None:
        ready = self.runner.call is not None and not busy
        self.compare_button.setEnabled(ready)
        self.suites.set_ready(ready)
        self.stop_button.setEnabled(busy)
        self.prompt.setReadOnly(busy)
        self.max_tokens.setEnabled(not busy)
        self.repeats.setEnabled(not busy)
        self.history.setEnabled(not busy)
        self.export_button.setEnabled(not busy and self.comparison is not None)
        if self.runner.call is None and not busy:
            self._show_status("Load a model to compare.")

    # --- history and export ---------------------------------------------------------------------

    def _refresh_history(self) -> None:
        self.history.clear()
        entries = self.store.list(self.conversation_id)
        for entry in entries:
            self.history.addItem(entry.title, str(entry.path))
        if not entries:
            self.history.addItem("No comparisons yet", None)

    def _on_history(self, index: int) -> None:
        path = self.history.itemData(index)
        if not path:
            return
        try:
            comparison = self.store.load(Path(path))
        except ValueError as err:
            self._show_status(str(err), error=True)
            return
        self.prompt.setPlainText(comparison.prompt)
        self.show_comparison(comparison)
        self._show_status(
            f"Comparison of {comparison.created.replace('T', ' ')} on {comparison.model} ({comparison.device})."
        )

    def _export(self, kind: str, file_filter: str) -> None:
        if self.comparison is None:
            return
        name = f"comparison-{self.comparison.created[:10]}-{self.comparison.id}.{kind}"
        chosen, _ = QFileDialog.getSaveFileName(self, "Export the comparison", str(Path.home() / name), file_filter)
        if not chosen:
            return
        try:
            self.export_to(Path(chosen), kind)
        except OSError as err:
            self._show_status(f"Could not export to {chosen}: {err}", error=True)
            return
        self._show_status(f"Saved {chosen}.")

    def _show_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {ERROR_COLOR};" if error else "")
