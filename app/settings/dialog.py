"""The settings dialog: model (the catalog with fetch, or a source with hub download), device, precision, sampling,
prompt, theme, local server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.settings.catalog_panel import CatalogPanel
from app.settings.download import Download
from app.settings.remote_panel import RemotePanel
from core.models.catalog import CATALOG, CatalogEntry
from core.models.fetch import fetch_model
from core.models.hub import download_hub_model
from core.models.options import DEVICES, DTYPES, QUANTIZATIONS, LoadOptions, ModelSource, catalog_source
from core.models.registry import ModelRegistry
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback
from core.settings import THEMES, SamplingSettings, ServerSettings, Settings

SOURCE_LABELS = {
    "default": "Embedded default (SmolLM2-135M-Instruct)",
    "folder": "Local model folder",
    "gguf": "GGUF file (llama family)",
    "hub": "Hugging Face hub repo id",
}


QUANTIZATION_LABELS = {
    "auto": "auto (CPU: int8 weights if measured faster; CUDA: 4-bit NF4 from 1B parameters)",
    "none": "none (full-precision weights)",
    "8bit": "8bit (CPU: int8 weights, PyTorch kernels; CUDA: bitsandbytes LLM.int8)",
    "4bit": "4bit (CPU: int4 weights, PyTorch kernels, lower quality; CUDA: bitsandbytes NF4)",
}


def _listed(text: str) -> tuple[str, ...]:
    """The entries of a comma- or space-separated list."""
    return tuple(text.replace(",", " ").split())


def _combo(values: tuple[str, ...], current: str) -> QComboBox:
    box = QComboBox()
    box.addItems(list(values))
    box.setCurrentText(current)
    return box


class SettingsDialog(QDialog):
    """Edits a copy of the settings; :meth:`result_settings` returns the validated result."""

    def __init__(
        self,
        settings: Settings,
        paths: AppPaths,
        parent: QWidget | None = None,
        catalog: tuple[CatalogEntry, ...] = CATALOG,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(560)
        self.paths = paths
        self._settings = settings
        self._download: Download | None = None
        self.tabs = QTabWidget()
        self.tabs.addTab(self._model_tab(settings, catalog), "Model")
        self.tabs.addTab(self._sampling_tab(settings.sampling), "Generation")
        self.tabs.addTab(self._chat_tab(settings), "Chat")
        self.tabs.addTab(self._server_tab(settings.server), "Server")
        self.error = QLabel(wordWrap=True, styleSheet="color: #dc2626;")
        self.error.hide()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    # --- tabs -------------------------------------------------------------------------------------

    def _model_tab(self, settings: Settings, catalog: tuple[CatalogEntry, ...]) -> QWidget:
        page = QWidget()
        self.source_kind = QComboBox()
        for kind, label in SOURCE_LABELS.items():
            self.source_kind.addItem(label, kind)
        self.source_kind.setCurrentIndex(list(SOURCE_LABELS).index(settings.source.kind))
        self.location = QLineEdit(settings.source.location)
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self._start_download)
        self.download_progress = QProgressBar(minimum=0, maximum=1000)
        self.download_cancel = QPushButton("Cancel")
        self.download_cancel.clicked.connect(self._cancel_download)
        self.download_status = QLabel(wordWrap=True)
        location_row = QHBoxLayout()
        location_row.addWidget(self.location, 1)
        location_row.addWidget(self.browse)
        location_row.addWidget(self.download_button)
        download_row = QHBoxLayout()
        download_row.addWidget(self.download_progress, 1)
        download_row.addWidget(self.download_cancel)
        self.catalog = CatalogPanel(self.paths, catalog)
        self.catalog.fetch_requested.connect(self._start_fetch)
        self.catalog.use_requested.connect(self._use_source)
        self.known = QComboBox()
        self.known.addItem("Choose a known model…", None)
        for model in ModelRegistry(self.paths).known():
            state = "" if model.available else " (not downloaded)"
            self.known.addItem(f"{model.name} ({model.source.kind}){state}", model.source)
        self.known.activated.connect(self._pick_known)
        self.device = _combo(DEVICES, settings.load.device)
        self.dtype = _combo(DTYPES, settings.load.dtype)
        self.quantization = QComboBox()
        for value in QUANTIZATIONS:
            self.quantization.addItem(QUANTIZATION_LABELS[value], value)
        self.quantization.setCurrentIndex(QUANTIZATIONS.index(settings.load.quantization))
        form = QFormLayout(page)
        form.addRow("Model catalog", self.catalog)
        form.addRow("Known models", self.known)
        form.addRow("Model source", self.source_kind)
        form.addRow("Location", location_row)
        form.addRow("", download_row)
        form.addRow("", self.download_status)
        form.addRow("Device", self.device)
        form.addRow("Precision (dtype)", self.dtype)
        form.addRow("Quantization", self.quantization)
        form.addRow(
            "",
            QLabel(
                "'auto' picks the measured best for the device; CUDA quantization needs bitsandbytes.", enabled=False
            ),
        )
        self.remote = RemotePanel(settings.remote)
        form.addRow(self.remote)
        self.source_kind.currentIndexChanged.connect(self._source_kind_changed)
        self._set_download_visible(False)
        self._source_kind_changed()
        return page

    def _sampling_tab(self, sampling: SamplingSettings) -> QWidget:
        page = QWidget()
        self.temperature = QDoubleSpinBox(
            minimum=0.0, maximum=5.0, singleStep=0.1, decimals=2, value=sampling.temperature
        )
        self.temperature.setToolTip("0 means greedy: the same answer every time")
        self.top_p = QDoubleSpinBox(minimum=0.01, maximum=1.0, singleStep=0.05, decimals=2, value=sampling.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=sampling.top_k, specialValueText="off")
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.01, decimals=2, value=sampling.min_p)
        self.repetition_penalty = QDoubleSpinBox(
            minimum=0.5, maximum=3.0, singleStep=0.05, decimals=2, value=sampling.repetition_penalty
        )
        self.max_new_tokens = QSpinBox(minimum=1, maximum=32768, value=sampling.max_new_tokens)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1, specialValueText="random")
        self.seed.setValue(-1 if sampling.seed is None else sampling.seed)
        self.stop_strings = QPlainTextEdit("\n".join(sampling.stop_strings))
        self.stop_strings.setPlaceholderText("One per line; the answer ends before the first one")
        self.stop_strings.setMaximumHeight(80)
        form = QFormLayout(page)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repetition penalty", self.repetition_penalty)
        form.addRow("Max new tokens", self.max_new_tokens)
        form.addRow("Seed", self.seed)
        form.addRow("Stop strings", self.stop_strings)
        return page

    def _chat_tab(self, settings: Settings) -> QWidget:
        page = QWidget()
        self.system_prompt = QPlainTextEdit(settings.system_prompt)
        self.theme = QComboBox()
        for theme in THEMES:
            self.theme.addItem({"system": "Follow the system"}.get(theme, theme.title()), theme)
        self.theme.setCurrentIndex(THEMES.index(settings.theme))
        form = QFormLayout(page)
        form.addRow("Default system prompt", self.system_prompt)
        form.addRow(
            "", QLabel("New chats start with it; each chat can change its own above the messages.", enabled=False)
        )
        form.addRow("Theme", self.theme)
        return page

    def _server_tab(self, server: ServerSettings) -> QWidget:
        page = QWidget()
        self.server_enabled = QCheckBox(
            "Serve an OpenAI-compatible API while the window is open", checked=server.enabled
        )
        self.server_port = QSpinBox(minimum=1, maximum=65535, value=server.port)
        self.server_key = QLineEdit(server.api_key, echoMode=QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.server_key.setPlaceholderText("none: any program on this computer may use the API")
        self.server_network = QCheckBox(
            "Allow other computers to connect (listen on all interfaces)", checked=server.allow_network
        )
        self.server_network.setToolTip(
            "Off: only programs on this computer (127.0.0.1). Set an API key before turning this on."
        )
        self.server_max_tokens = QSpinBox(minimum=1, maximum=32768, value=server.max_tokens)
        self.server_hosts = QLineEdit(", ".join(server.allowed_hosts))
        self.server_hosts.setPlaceholderText("none: loopback and this computer's addresses only")
        self.server_hosts.setToolTip(
            "Other names clients on the network reach this computer by (e.g. mybox.local), separated by commas. "
            "Requests for any other name are refused: a web page could pose as it (DNS rebinding)."
        )
        self.server_origins = QLineEdit(", ".join(server.allowed_origins))
        self.server_origins.setPlaceholderText("none: web pages may not use the API")
        self.server_origins.setToolTip(
            "Web apps you trust to call the API from a browser (e.g. http://localhost:3000), separated by "
            "commas. Requests from any other web page are refused."
        )
        form = QFormLayout(page)
        form.addRow(self.server_enabled)
        form.addRow("Port", self.server_port)
        form.addRow("API key (Bearer)", self.server_key)
        form.addRow(self.server_network)
        form.addRow("Max tokens per request", self.server_max_tokens)
        form.addRow("Allowed host names", self.server_hosts)
        form.addRow("Allowed web origins", self.server_origins)
        form.addRow(
            "",
            QLabel(
                "Base URL: http://127.0.0.1:PORT/v1 (see the README). Answers share the window's model "
                "and queue behind its chats.",
                wordWrap=True,
                enabled=False,
            ),
        )
        return page

    # --- result -----------------------------------------------------------------------------------

    def result_settings(self) -> Settings:
        """The edited settings; raises ValueError with a message when a value is invalid."""
        kind = self.source_kind.currentData()
        source = ModelSource(kind, "" if kind == "default" else self.location.text().strip())
        load = LoadOptions(
            self.device.currentText(),
            self.dtype.currentText(),
            self.quantization.currentData(),
            self._settings.load.attn_implementation,
        )
        sampling = SamplingSettings(
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            min_p=self.min_p.value(),
            repetition_penalty=self.repetition_penalty.value(),
            max_new_tokens=self.max_new_tokens.value(),
            seed=None if self.seed.value() < 0 else self.seed.value(),
            stop_strings=tuple(self.stop_strings.toPlainText().splitlines()),
        )
        server = replace(
            self._settings.server,
            enabled=self.server_enabled.isChecked(),
            port=self.server_port.value(),
            api_key=self.server_key.text().strip(),
            allow_network=self.server_network.isChecked(),
            max_tokens=self.server_max_tokens.value(),
            allowed_hosts=_listed(self.server_hosts.text()),
            allowed_origins=_listed(self.server_origins.text()),
        )
        return replace(
            self._settings,
            source=source,
            load=load,
            sampling=sampling,
            system_prompt=self.system_prompt.toPlainText().strip(),
            theme=self.theme.currentData(),
            server=server,
            remote=self.remote.result(),
        )

    def accept(self) -> None:
        try:
            self.result_settings()
        except ValueError as err:
            self.error.setText(str(err))
            self.error.show()
            return
        self._cancel_download()
        super().accept()

    def reject(self) -> None:
        self._cancel_download()
        super().reject()

    # --- model source -----------------------------------------------------------------------------

    def _source_kind_changed(self) -> None:
        kind = self.source_kind.currentData()
        self.location.setEnabled(kind != "default")
        self.browse.setVisible(kind in ("folder", "gguf"))
        self.download_button.setVisible(kind == "hub")
        self.location.setPlaceholderText(
            {"folder": "a folder with config.json and weights", "gguf": "a .gguf file", "hub": "owner/name"}.get(
                kind, ""
            )
        )

    def _pick_known(self, index: int) -> None:
        source = self.known.itemData(index)
        if isinstance(source, ModelSource):
            self._use_source(source)

    def _use_source(self, source: ModelSource) -> None:
        self.source_kind.setCurrentIndex(list(SOURCE_LABELS).index(source.kind))
        self.location.setText(source.location)

    def _browse(self) -> None:
        if self.source_kind.currentData() == "gguf":
            path, _ = QFileDialog.getOpenFileName(
                self, "Choose a GGUF file", self.location.text(), "GGUF models (*.gguf)"
            )
        else:
            path = QFileDialog.getExistingDirectory(self, "Choose a model folder", self.location.text())
        if path:
            self.location.setText(path)

    def _start_download(self) -> None:
        repo_id = self.location.text().strip()
        if repo_id.count("/") != 1:
            self.download_status.setText("Enter a hub repo id of the form owner/name.")
            return
        models_dir = self.paths.models_dir

        def work(progress: ProgressCallback, cancel: CancelToken) -> Path:
            return download_hub_model(repo_id, models_dir, progress, cancel)

        self._run_download(Download(repo_id, work, self), self._hub_downloaded)

    def _start_fetch(self, entry: CatalogEntry) -> None:
        paths = self.paths

        def work(progress: ProgressCallback, cancel: CancelToken) -> Path:
            return fetch_model(entry, paths, progress, cancel)

        self._run_download(Download(entry.name, work, self), lambda _where: self._fetched(entry))

    def _run_download(self, download: Download, done: Callable[[str], None]) -> None:
        self._cancel_download()
        self._download = download
        download.progress.connect(self._download_progress)
        download.finished.connect(done)
        download.failed.connect(self._download_failed)
        self._set_download_visible(True)
        self.download_button.setEnabled(False)
        self.catalog.set_busy(True)
        self.download_status.setText(f"Downloading {download.label}…")
        download.start()

    def _download_progress(self, stage: str, fraction: float) -> None:
        self.download_progress.setValue(int(fraction * 1000))
        self.download_status.setText(stage)

    def _hub_downloaded(self, folder: str) -> None:
        ModelRegistry(self.paths).add(
            ModelSource("hub", self._download.label if self._download else self.location.text())
        )
        self.download_status.setText(f"Downloaded to {folder}. Press OK to load it.")
        self._download_done()

    def _fetched(self, entry: CatalogEntry) -> None:
        self._download_done()
        self.catalog.refresh()
        self.catalog.select(entry.id)
        self._use_source(catalog_source(entry, self.paths))
        self.download_status.setText(f"{entry.name} is fetched and checked. Press OK to load it.")

    def _download_failed(self, message: str) -> None:
        self.download_status.setText(message)
        self._download_done()

    def _download_done(self) -> None:
        self._download = None
        self._set_download_visible(False)
        self.download_button.setEnabled(True)
        self.catalog.set_busy(False)

    def _cancel_download(self) -> None:
        if self._download is not None:
            self._download.cancel()

    def _set_download_visible(self, visible: bool) -> None:
        self.download_progress.setVisible(visible)
        self.download_cancel.setVisible(visible)

    @property
    def downloading(self) -> bool:
        return self._download is not None

    def show_tab(self, name: str) -> None:
        for i in range(self.tabs.count()):
            if self.tabs.tabText(i) == name:
                self.tabs.setCurrentIndex(i)
