"""Compare mode's local against remote (offscreen): the tiny model on one side, a real ``serve`` on the other."""

from __future__ import annotations

import pytest

from app.compare.page import ComparePage
from app.compare.runner import thread_call
from app.settings.live import LiveSettings
from core.settings import RemoteSettings, SamplingSettings, Settings
from tests.remote_serve import API_KEY, Serve


def test_local_against_remote_streams_both_panes_and_shows_both_rates(
    qtbot, tiny_ready, app_paths, remote_serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTE29_COMPARE_KEY", API_KEY)
    local_only = Settings(mode="plain", sampling=SamplingSettings(max_new_tokens=8))
    live = LiveSettings(local_only)
    page = ComparePage(thread_call(tiny_ready), app_paths, live)
    qtbot.addWidget(page)
    page.show()
    page.against_remote.setChecked(True)
    page.compare_button.click()
    assert "Turn on a remote source first" in page.status.text() and not page.runner.busy
    with pytest.raises(ValueError, match="No remote source is on"):  # the runner refuses too, and stays idle
        page.runner.compare_remote("hi", local_only, 8)
    assert not page.runner.busy

    remote = RemoteSettings(True, remote_serve.url, remote_serve.model, "REMOTE29_COMPARE_KEY")
    live.set(Settings(mode="plain", sampling=SamplingSettings(max_new_tokens=8), remote=remote))
    page.max_tokens.setValue(8)
    with qtbot.waitSignal(page.runner.compared, timeout=60_000):
        page.compare_button.click()
    qtbot.waitUntil(lambda: not page.runner.busy)
    status = page.status.text()
    assert status.startswith("local ") and " tok/s · remote " in status and "x the local rate." in status
    assert page.plain_pane.title.text() == "<b>Local (plain)</b>"
    assert (
        page.lookahead_pane.title.text() == f"<b>Remote: {remote_serve.model} at {remote_serve.url.split('/')[2]}</b>"
    )
    for pane in (page.plain_pane, page.lookahead_pane):
        assert pane.text.toPlainText() and "tok/s" in pane.rate.text()
    assert page.history.count() == 1 and page.store.list(page.conversation_id) == []  # not kept as a comparison
