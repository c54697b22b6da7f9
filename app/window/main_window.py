"""The main window: toolbar, conversation sidebar, chat page and Compare page (in a page stack), live figures.

Other pages go in with :meth:`MainWindow.add_page` and their toolbar actions with
:meth:`MainWindow.add_toolbar_action`, as the Compare page does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.bridge.model_worker import ModelWorker
from app.chat.composer import Composer
from app.chat.controller import ChatController
from app.chat.history_list import HistoryList
from app.chat.system_prompt import SystemPromptBar, SystemPromptDialog
from app.chat.view import ChatView
from app.compare.page import ComparePage
from app.server.control import ServerControl
from app.server.indicator import ServerIndicator
from app.settings.dialog import SettingsDialog
from app.settings.live import LiveSettings
from app.settings.remote_panel import keep_key
from app.toolbar.mode_controls import ModeControls
from app.toolbar.preset_controls import PresetControls
from app.window.dialogs import AboutDialog, HelpDialog
from app.window.notices import LoadPanel, NoticeBar
from app.window.shortcuts import SHORTCUTS
from app.window.status_bar import FiguresBar
from app.window.theme import apply_theme
from core.atomic import write_text_atomic
from core.chat.history import HistoryError, open_history
from core.engine.answer_job import AnswerOutcome
from core.engine.ready import ModelInfo
from core.models.catalog import first_start_offer
from core.paths import AppPaths, resource_path
from core.presets import Preset, PresetStore
from core.settings import LookaheadSettings, SamplingSettings, Settings, SettingsStore

log = logging.getLogger(__name__)

FIGURES_MS = 200  # live figures refresh 5 times a second while generating
SHUTDOWN_S = 1.5


class MainWindow(QMainWindow):
    """The chat window; owns the settings, the history store and the model worker."""

    def __init__(self, paths: AppPaths) -> None:
        super().__init__()
        self.paths = paths
        self.closed = False  # closeEvent ran: the worker is stopped and the history closed
        try:
            paths.ensure()
            folders_problem = None
        except OSError as err:  # a read-only home: the window still opens, with nothing to save
            folders_problem = (
                f"The app's folders could not be created ({err.strerror or err}: {err.filename}). "
                "Settings and chats of this session will not be kept; check that the folder is writable."
            )
        self.setWindowTitle("Lookahead Chat")
        self.setWindowIcon(QIcon(str(resource_path("icons", "lookahead-chat.svg"))))
        self.resize(1180, 760)
        self.settings_store = SettingsStore(paths.config_dir)
        loaded = self.settings_store.load()
        self.settings = LiveSettings(loaded.settings, self.settings_store, self)
        presets = PresetStore(paths.config_dir).load()
        self.model: ModelInfo | None = None
        self.last_outcome: AnswerOutcome | None = None
        self._load_token = None
        self.worker = ModelWorker(paths)
        self.store, store_problem = open_history(self.paths.data_dir)
        if store_problem:
            log.error("chat history: %s", store_problem)

        self._build_toolbar(presets.user)
        self.history = HistoryList()
        self.notice = NoticeBar()
        self.load_panel = LoadPanel()
        self.chat_view = ChatView()
        self.system_prompt_bar = SystemPromptBar()
        self.composer = Composer()
        self.chat_page = QWidget(objectName="chatPage")
        chat_layout = QVBoxLayout(self.chat_page)
        chat_layout.setContentsMargins(0, 0, 0, 0)
        chat_layout.setSpacing(4)
        chat_layout.addWidget(self.notice)
        chat_layout.addWidget(self.load_panel)
        chat_layout.addWidget(self.system_prompt_bar)
        chat_layout.addWidget(self.chat_view, 1)
        chat_layout.addWidget(self.composer)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.chat_page)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.history)
        self.splitter.addWidget(self.pages)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, 920])
        self.setCentralWidget(self.splitter)
        self.figures = FiguresBar()
        self.setStatusBar(self.figures)
        self.server = ServerControl(self.worker.thread, self.settings, self)
        self.server_indicator = ServerIndicator(self.server.activity)
        self.figures.addPermanentWidget(self.server_indicator)
        self.server.changed.connect(self.server_indicator.refresh)

        self.chat = ChatController(self.store, self.worker, self.chat_view, self.composer, self.settings, self)
        self._connect()
        self._bind_shortcuts()
        self._figures_timer = QTimer(self, interval=FIGURES_MS)
        self._figures_timer.timeout.connect(self._update_figures)
        self.apply_theme()
        self.refresh_conversations()
        self._show_system_prompt()
        for problem in (folders_problem, loaded.problem, presets.problem, store_problem):
            if problem:
                self.notice.show_message(problem, "error", lasting=True)
        self._offer_catalog_model()
        self._build_compare()
        self.load_model()

    # --- construction -----------------------------------------------------------------------------

    def _offer_catalog_model(self) -> None:
        """A first start on the default model names the better model this computer has room for, once."""
        current = self.settings.current
        if current.catalog_offered or current.source.kind != "default":
            return
        offer = first_start_offer()
        if offer is not None:
            self.notice.show_message(offer, "info", lasting=True)
        self.settings.set(replace(current, catalog_offered=True))

    def _build_toolbar(self, user_presets: tuple[Preset, ...]) -> None:
        self.toolbar = QToolBar("Main", movable=False, objectName="mainToolbar")
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.addToolBar(self.toolbar)
        self.sidebar_action = QAction("☰", self, toolTip="Show or hide the chat list", checkable=True, checked=True)
        self.sidebar_action.toggled.connect(lambda on: self.history.setVisible(on))
        self.toolbar.addAction(self.sidebar_action)
        self.model_button = QToolButton(text="loading model…", toolTip="The model in use: click to change it")
        self.model_button.clicked.connect(lambda: self.open_settings("Model"))
        self.toolbar.addWidget(self.model_button)
        self.toolbar.addSeparator()
        self.mode_controls = ModeControls(self.settings.current.mode, self.settings.current.lookahead)
        self.toolbar.addWidget(self.mode_controls)
        self.toolbar.addSeparator()
        self.preset_controls = PresetControls(
            PresetStore(self.paths.config_dir), user_presets, self.settings.current.sampling
        )
        self.toolbar.addWidget(self.preset_controls)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.toolbar.addWidget(spacer)
        self._toolbar_end = self.toolbar.addSeparator()  # mode actions (e.g. Compare) go before this
        self.settings_action = QAction("⚙ Settings", self, toolTip="Settings (Ctrl+,)")
        self.settings_action.triggered.connect(lambda: self.open_settings())
        self.toolbar.addAction(self.settings_action)
        self.help_action = QAction("?", self, toolTip="Keyboard shortcuts and About")
        self.help_action.triggered.connect(self.show_help)
        self.toolbar.addAction(self.help_action)
        about = QAction("About", self)
        about.triggered.connect(self.show_about)
        self.toolbar.addAction(about)

    def _connect(self) -> None:
        queued = Qt.ConnectionType.QueuedConnection
        self.settings.changed.connect(self._settings_changed)
        self.settings.save_failed.connect(self.show_error)
        self.worker.loads.load_progress.connect(self._load_progress, queued)
        self.worker.loads.model_loaded.connect(self._model_loaded, queued)
        self.worker.loads.load_failed.connect(self._load_failed, queued)
        self.worker.loads.background_progress.connect(self.figures.show_background, queued)
        self.worker.loads.model_upgraded.connect(self._model_upgraded, queued)
        self.figures.cancel_background.connect(self.worker.cancel_background)
        self.worker.answers.started.connect(lambda *_: self._update_figures(), queued)  # 'generating' at once
        self.load_panel.cancel_requested.connect(self.cancel_load)
        self.load_panel.retry_requested.connect(self.load_model)
        self.load_panel.settings_requested.connect(lambda: self.open_settings("Model"))
        self.history.selected.connect(self.chat.open)
        self.history.new_requested.connect(self.new_chat)
        self.history.search_changed.connect(lambda _text: self.refresh_conversations())
        self.history.rename_requested.connect(self.rename_conversation)
        self.history.delete_requested.connect(self.delete_conversation)
        self.history.export_requested.connect(self.export_conversation)
        self.chat.conversations_changed.connect(self.refresh_conversations)
        self.chat.error.connect(self.show_error)
        self.chat.busy_changed.connect(self._busy_changed)
        self.chat.answer_done.connect(self._answer_done)
        self.chat.system_prompt_changed.connect(self._show_system_prompt)
        self.system_prompt_bar.edit_requested.connect(self.edit_system_prompt)
        self.preset_controls.chosen.connect(self.set_sampling)
        self.preset_controls.error.connect(self.show_error)
        self.mode_controls.mode_changed.connect(self.set_mode)
        self.mode_controls.lookahead_changed.connect(self.set_lookahead)

    def _bind_shortcuts(self) -> None:
        handlers = {
            "new_chat": self.new_chat,
            "send": self.composer.submit,
            "stop": self._escape,
            "regenerate": self.chat.regenerate,
            "edit_last": self.chat.edit_last,
            "copy_last": self.chat.copy_last_answer,
            "search": self._focus_search,
            "toggle_mode": self.mode_controls.toggle,
            "settings": self.open_settings,
            "rename": lambda: self._with_current(self.rename_conversation),
            "delete": lambda: self._with_current(self.delete_conversation),
            "help": self.show_help,
            "quit": self.close,
        }
        self.shortcut_actions: dict[str, QAction] = {}
        for shortcut in SHORTCUTS:
            action = QAction(shortcut.description, self, shortcut=QKeySequence(shortcut.keys))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.triggered.connect(lambda _checked=False, handler=handlers[shortcut.name]: handler())
            self.addAction(action)
            self.shortcut_actions[shortcut.name] = action

    def _build_compare(self) -> None:
        """The Compare page and its toolbar toggle. Comparisons run as jobs on the model worker's thread,
        so they never overlap a chat answer; they are kept with the conversation on show."""
        self.compare_page = ComparePage(self.worker.run_job, self.paths, self.settings, lambda: self.chat.current_id)
        self.add_page(self.compare_page)
        self.compare_action = QAction(
            "Compare",
            self,
            checkable=True,
            objectName="compareAction",
            toolTip="Answer one prompt plain and with lookahead, side by side, and compare the speed",
        )
        self.compare_action.toggled.connect(
            lambda on: self.pages.setCurrentWidget(self.compare_page if on else self.chat_page)
        )
        self.add_toolbar_action(self.compare_action)

    # --- extension points for other modes ----------------------------------------------------------

    def add_page(self, widget: QWidget) -> int:
        """Add a page to the central stack (the chat page is index 0); returns its index."""
        return self.pages.addWidget(widget)

    def add_toolbar_action(self, action: QAction) -> None:
        """Put a mode action (e.g. Compare) in the toolbar, before Settings."""
        self.toolbar.insertAction(self._toolbar_end, action)

    # --- model --------------------------------------------------------------------------------------

    def load_model(self) -> None:
        """Load the model the settings name (first run: fetches the default model)."""
        settings = self.settings.current
        self.model = None
        self.model_button.setText(f"loading {settings.source.display_name}…")
        self.figures.set_model(None)
        self.figures.background_done("")
        self._show_source()
        self.figures.set_state("loading model")
        self.load_panel.show_progress(f"Loading {settings.source.display_name}", 0.0)
        self._load_token = self.worker.load(settings.source, settings.load)

    def cancel_load(self) -> None:
        if self._load_token is not None:
            self._load_token.cancel()

    def _load_progress(self, stage: str, fraction: float) -> None:
        """The load panel and the status bar name the stage in progress; an answer waiting for the model
        keeps the status bar's 'waiting for the model'."""
        if self.model is None and self._load_token is not None and not self._load_token.cancelled:
            self.load_panel.show_progress(stage, fraction)
            if not self.chat.busy:
                self.figures.set_state(f"{stage[:1].lower()}{stage[1:]} {fraction * 100:.0f}%")

    def _model_loaded(self, info: ModelInfo) -> None:
        self.model = info
        self._load_token = None
        self.load_panel.hide()
        self.figures.set_model(info)
        self._show_source()
        if self.chat.busy:
            self._update_figures()  # an answer waited for the model: it starts now
        else:
            self.figures.set_state("ready")
        log.info("model %s ready on %s in %.1f s", info.name, info.device_label, info.load_seconds)

    def _show_source(self) -> None:
        """The toolbar's model button and the status bar's device: the remote answering, or the local model loaded."""
        remote, info = self.settings.current.remote.source(), self.model
        if remote is not None:
            self.model_button.setText(f"remote: {remote.model} at {remote.host}")
            self.figures.device.setText(f"answers from {remote.host}")
            self.figures.auto.setText("")  # the local model's Auto and context do not apply
            self.figures.context.setText("")
        elif info is not None:
            self.model_button.setText(
                f"{info.name} · {'GPU' if info.device_kind == 'cuda' else 'CPU'} · {info.precision}"
            )
            self.figures.set_model(info)

    def _model_upgraded(self, info: ModelInfo, message: str) -> None:
        """The background work is done: the next answer runs the faster step, and the status bar says so."""
        if self.model is None:  # another load began meanwhile
            return
        self.model = info
        self.figures.set_model(info)
        self._show_source()
        self.figures.background_done(message)

    def _load_failed(self, message: str) -> None:
        self._load_token = None
        self.model_button.setText("no model")
        self._show_source()
        self.figures.set_state("no model")
        self.load_panel.show_failure(message)

    # --- settings -----------------------------------------------------------------------------------

    def open_settings(self, tab: str | None = None) -> None:
        dialog = SettingsDialog(self.settings.current, self.paths, self)
        if tab:
            dialog.show_tab(tab)
        if dialog.exec():
            new = dialog.result_settings()
            if dialog.remote.typed_key and new.remote.url:
                keep_key(new.remote.url, dialog.remote.typed_key, self, self.notice.show_message)
            self.apply_settings(new)

    def apply_settings(self, new: Settings) -> None:
        """Use and save new settings (the Settings dialog's) and show them in the toolbar's controls."""
        self.settings.set(new)
        self.mode_controls.set_mode(new.mode)
        self.mode_controls.editor.set_settings(new.lookahead)
        self.preset_controls.show_sampling(new.sampling)

    def _settings_changed(self, new: Settings, old: Settings) -> None:
        """Reload the model when its source or load options changed, restyle on a new theme, show the
        system prompt (the default may have changed). The server follows the settings itself."""
        if (old.source, old.load) != (new.source, new.load):
            self.load_model()
        if old.remote != new.remote:
            self._show_source()
        if old.theme != new.theme:
            self.apply_theme()
        self._show_system_prompt()

    def set_sampling(self, sampling: SamplingSettings) -> None:
        """Sampling settings from a preset, for the next answer."""
        self.settings.update(sampling=sampling)

    def set_mode(self, mode: str) -> None:
        """Plain or lookahead, for the next answer."""
        if mode != self.settings.current.mode:
            self.settings.update(mode=mode)

    def set_lookahead(self, lookahead: LookaheadSettings) -> None:
        self.settings.update(lookahead=lookahead)

    def apply_theme(self) -> None:
        app = QApplication.instance()
        self.chat_view.set_dark(apply_theme(app, self.settings.current.theme))

    # --- conversations ------------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        try:
            conversations = self.store.conversations(self.history.search.text())
        except HistoryError as err:
            self.show_error(str(err))
            return
        self.history.show_conversations(conversations, self.chat.current_id)

    def new_chat(self) -> None:
        self.chat.open(None)
        self.history.list.clearSelection()
        self.history.list.setCurrentItem(None)
        self.composer.box.setFocus()

    def edit_system_prompt(self) -> None:
        """Ask for the current chat's system prompt."""
        dialog = SystemPromptDialog(self.chat.own_system_prompt, self.settings.current.system_prompt, self)
        if dialog.exec():
            self.chat.set_system_prompt(dialog.result_prompt())

    def _show_system_prompt(self) -> None:
        self.system_prompt_bar.show_prompt(self.chat.system_prompt, self.chat.own_system_prompt is not None)

    def rename_conversation(self, conversation_id: int) -> None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=conv.title)
        if ok and title.strip():
            try:
                self.store.rename(conversation_id, title.strip())
            except HistoryError as err:
                self.show_error(str(err))
            self.refresh_conversations()

    def delete_conversation(self, conversation_id: int) -> None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        answer = QMessageBox.question(
            self, "Delete chat", f"Delete “{conv.title}” and all its messages? This cannot be undone."
        )
        if answer == QMessageBox.StandardButton.Yes and self.chat.delete(conversation_id):
            self.compare_page.store.delete_conversation(str(conversation_id))
            self.refresh_conversations()

    def export_conversation(self, conversation_id: int, kind: str) -> None:
        conv = self.store.conversation(conversation_id)
        if conv is None:
            return
        suffix, label = (".md", "Markdown (*.md)") if kind == "md" else (".json", "JSON (*.json)")
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip() or "chat"
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", str(Path.home() / f"{name}{suffix}"), label)
        if path:
            self.export_to(conversation_id, kind, Path(path))

    def export_to(self, conversation_id: int, kind: str, path: Path) -> None:
        """Write the conversation as Markdown (``md``) or JSON (``json``) to ``path``."""
        try:
            if kind == "md":
                text = self.store.export_markdown(conversation_id)
            else:
                text = json.dumps(self.store.export_json(conversation_id), indent=2, ensure_ascii=False)
            write_text_atomic(path, text)
        except (HistoryError, OSError) as err:
            self.show_error(f"Could not export the chat to {path}: {err}")

    # --- feedback -----------------------------------------------------------------------------------

    def show_error(self, message: str) -> None:
        self.notice.show_message(message, "error")

    def bring_to_front(self) -> None:
        """Show the window on top (a second start of the app asked for it), unless it has closed: the ask can
        arrive after its worker stopped and its history closed, and a window shown again would keep the app
        from quitting."""
        if self.closed:
            return
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    def show_help(self) -> None:
        HelpDialog(self).exec()

    def show_about(self) -> None:
        AboutDialog(self.model, self).exec()

    def _busy_changed(self, busy: bool) -> None:
        if busy:
            self.notice.clear_passing()
            self._figures_timer.start()
        else:
            self._figures_timer.stop()
        self._update_figures()

    def _answer_done(self, outcome: AnswerOutcome) -> None:
        self.last_outcome = outcome
        if self.model is not None and outcome.device_label and not outcome.remote:
            self.figures.set_device_label(outcome.device_label, self.model.device_kind, self.model.precision)
        self._update_figures()

    def _update_figures(self) -> None:
        live = self.chat.live
        if live is not None:
            figures = live.figures
            self.figures.show_live(
                live.start is not None,
                live.live_rate() if figures else None,
                figures.tokens_per_step if figures and not figures.remote else None,
                live.context(),
            )
        elif self.last_outcome is not None and self.last_outcome.figures is not None:
            last = self.last_outcome
            self.figures.show_final(last.figures, None if last.remote else self.model)
        elif self.model is not None:
            self.figures.set_state("ready")

    def _escape(self) -> None:
        if self.chat.busy:
            self.chat.stop()
        else:
            self.chat_view.cancel_edits()

    def _focus_search(self) -> None:
        self.sidebar_action.setChecked(True)
        self.history.search.setFocus()
        self.history.search.selectAll()

    def _with_current(self, action) -> None:
        if self.chat.current_id is not None:
            action(self.chat.current_id)

    # --- closing ------------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        """Stop a comparison, save a half-finished answer (marked interrupted), stop the worker, close the history."""
        self.closed = True
        self.compare_page.runner.stop()
        self.chat.shutdown()
        if not self.worker.shutdown(SHUTDOWN_S):
            log.warning("the model worker did not stop within %.1f s; exiting anyway", SHUTDOWN_S)
        self.store.close()
        super().closeEvent(event)
