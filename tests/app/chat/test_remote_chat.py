"""The window chatting with a remote ``lookahead-chat serve``: streaming, Stop, Continue, Regenerate, Edit,
history across a restart, and the API key nowhere in the files, the export or the logs."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from core.paths import AppPaths
from core.settings import RemoteSettings, SamplingSettings
from tests.remote_serve import API_KEY, Serve

KEY_VARIABLE = "REMOTE29_WINDOW_KEY"


def test_the_window_chats_with_a_remote_serve_and_keeps_no_key(
    remote_serve: Serve,
    tiny_settings,
    open_window,
    ui,
    app_paths: AppPaths,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    monkeypatch.setenv(KEY_VARIABLE, API_KEY)
    tiny_settings(remote=RemoteSettings(True, remote_serve.url, remote_serve.model, KEY_VARIABLE), max_new_tokens=10)
    window = open_window(wait_for_model=False)  # a remote answer waits for no local model
    assert window.model_button.text() == f"remote: {remote_serve.model} at {remote_serve.url.split('/')[2]}"

    ui.send(window, "Hello")
    first = ui.stored(window)[-1]
    assert first.status in ("complete", "truncated") and first.content and first.mode.startswith("remote ")
    assert window.chat_view.messages[-1].text == first.content
    host = remote_serve.url.split("/")[2]
    assert window.figures.device.text() == f"answers from {host}" and "tokens/step" not in window.figures.step.text()
    assert (
        window.chat_view.messages[-1]
        .figures.text()
        .startswith(f"{first.stats['tokens_per_second']:.1f} tok/s · remote ")
    )

    window.set_sampling(SamplingSettings(max_new_tokens=900))
    ui.send(window, "Tell me more", wait=False)
    ui.wait_text(window)
    pressed = time.monotonic()
    window.chat.stop()
    ui.wait_idle(window)
    assert time.monotonic() - pressed < 0.5
    stopped = ui.stored(window)[-1]
    assert stopped.status == "stopped" and stopped.content == window.chat_view.messages[-1].text

    window.set_sampling(SamplingSettings(max_new_tokens=6))
    window.chat.continue_answer()
    ui.wait_idle(window)
    continued = ui.stored(window)[-1]
    assert continued.id == stopped.id and continued.content.startswith(stopped.content)
    assert len(continued.content) > len(stopped.content)

    window.chat.regenerate()
    ui.wait_idle(window)
    conversation = window.chat.current_id
    assert len(window.store.branches(conversation).siblings(ui.stored(window)[-1].id)) == 2
    window.chat.edit(0, "Hi again")
    ui.wait_idle(window)
    path = ui.stored(window)
    assert (
        [m.content for m in path[:1]] == ["Hi again"]
        and path[-1].status in ("complete", "truncated")
        and len(path) == 2
    )
    shown = [(m.role, m.content) for m in path]

    exports = [tmp_path / "chat.md", tmp_path / "chat.json"]
    window.export_to(conversation, "md", exports[0])
    window.export_to(conversation, "json", exports[1])
    assert "Hi again" in exports[0].read_text() and json.loads(exports[1].read_text())
    window.close()

    again = open_window(wait_for_model=False)
    again.chat.open(conversation)
    assert [(m.role, m.content) for m in ui.stored(again)] == shown
    assert [w.text for w in again.chat_view.messages] == [content for _, content in shown]
    again.close()

    kept = [p for folder in (app_paths.config_dir, app_paths.data_dir) for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "settings.json" for p in kept)
    for file in [*kept, *exports]:
        assert API_KEY.encode() not in file.read_bytes(), file
    assert caplog.records and API_KEY not in caplog.text
