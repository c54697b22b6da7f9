"""The settings dialog: editing and validating, and a hub download that fails."""

from __future__ import annotations

from app.settings.dialog import SettingsDialog
from core.models.options import ModelSource
from core.settings import ServerSettings, Settings


def test_settings_dialog_edits_and_validates(qtbot, app_paths) -> None:
    dialog = SettingsDialog(Settings(), app_paths)
    qtbot.addWidget(dialog)
    dialog.temperature.setValue(0.7)
    dialog.top_k.setValue(40)
    dialog.seed.setValue(7)
    dialog.system_prompt.setPlainText("Be brief.")
    dialog.theme.setCurrentIndex(2)
    dialog.source_kind.setCurrentIndex(1)
    dialog.location.setText("/models/llama")
    dialog.dtype.setCurrentText("bf16")
    assert "CPU: int8 weights" in dialog.quantization.itemText(
        2
    ) and "CUDA: bitsandbytes" in dialog.quantization.itemText(2)
    dialog.quantization.setCurrentIndex(2)
    result = dialog.result_settings()
    assert result.load.quantization == "8bit"
    assert result.sampling.temperature == 0.7 and result.sampling.top_k == 40 and result.sampling.seed == 7
    assert result.source == ModelSource("folder", "/models/llama") and result.load.dtype == "bf16"
    assert result.system_prompt == "Be brief." and result.theme == "dark"
    dialog.location.setText("")
    dialog.accept()
    assert dialog.error.isVisibleTo(dialog) and "needs a location" in dialog.error.text()


def test_hub_download_failure_is_shown_in_the_dialog(qtbot, app_paths) -> None:
    dialog = SettingsDialog(Settings(), app_paths)
    qtbot.addWidget(dialog)
    dialog.source_kind.setCurrentIndex(3)
    dialog.location.setText("someone/some-model")
    dialog.download_button.click()
    assert dialog.downloading
    qtbot.waitUntil(lambda: not dialog.downloading, timeout=60_000)
    assert "someone/some-model" in dialog.download_status.text()
    assert dialog.download_button.isEnabled()


def test_the_server_tab_edits_the_allowed_hosts_and_origins(qtbot, app_paths) -> None:
    start = Settings(server=ServerSettings(enabled=True, allowed_hosts=("old.lan",)))
    dialog = SettingsDialog(start, app_paths)
    qtbot.addWidget(dialog)
    assert dialog.server_hosts.text() == "old.lan" and dialog.server_origins.text() == ""
    dialog.server_hosts.setText("MyBox.local, 192.168.1.20")
    dialog.server_origins.setText("http://localhost:3000 https://app.example/")
    server = dialog.result_settings().server
    assert server.allowed_hosts == ("mybox.local", "192.168.1.20") and server.enabled
    assert server.allowed_origins == ("http://localhost:3000", "https://app.example")
    dialog.server_origins.setText("localhost:3000")
    dialog.accept()
    assert dialog.error.isVisibleTo(dialog) and "allowed_origins" in dialog.error.text()
    assert "http://localhost:3000" in dialog.error.text()  # what a good one looks like
