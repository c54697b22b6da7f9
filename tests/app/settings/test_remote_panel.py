"""Settings, Model, Remote (offscreen): the server's models listed from a real ``serve``, and the one-line
messages for a bad URL and for a computer without a credential store."""

from __future__ import annotations

import keyring
import pytest
from keyring.backends.fail import Keyring as NoStore

from app.settings.remote_panel import RemotePanel
from core.settings import RemoteSettings
from tests.remote_serve import API_KEY, Serve


def test_the_remote_panel_lists_the_servers_models_and_says_what_went_wrong(
    qtbot, remote_serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel = RemotePanel(RemoteSettings())
    qtbot.addWidget(panel)
    panel.url.setText("gpu-box:8000")
    panel.list_button.click()
    assert "is not a server address" in panel.status.text()

    monkeypatch.setenv("REMOTE29_PANEL_KEY", API_KEY)
    panel.url.setText(remote_serve.url)
    panel.key_env.setText("REMOTE29_PANEL_KEY")
    panel.list_button.click()
    qtbot.waitUntil(lambda: panel.list_button.isEnabled(), timeout=30_000)
    assert panel.status.text() == "1 model on the server." and panel.model.currentText() == remote_serve.model
    panel.enabled.setChecked(True)
    assert panel.result() == RemoteSettings(True, remote_serve.url, remote_serve.model, "REMOTE29_PANEL_KEY")

    monkeypatch.setattr(keyring.core, "_keyring_backend", NoStore())  # as on CI and headless Linux
    panel.key.setText("sk-typed")
    panel.list_button.click()
    qtbot.waitUntil(lambda: panel.list_button.isEnabled(), timeout=30_000)
    assert "credential store cannot keep the API key" in panel.status.text() and "\n" not in panel.status.text()
    panel.model.setCurrentText("")
    with pytest.raises(ValueError, match="No remote model is chosen"):
        panel.result()
