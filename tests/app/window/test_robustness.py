"""The window survives what goes wrong: restarts, bad settings, crashes, OOM, a full disk, closing mid-answer."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import torch

from core.chat.history import HistoryStore
from core.settings import SETTINGS_FILE


@pytest.fixture
def forward_hook() -> Iterator[Callable[[Callable[[int], None]], None]]:
    """Install ``action(call_number)`` before every forward pass on the model worker thread (each embeds its tokens once)."""
    handles = []

    def install(action: Callable[[int], None]) -> None:
        calls = [0]

        def hook(module: torch.nn.Module, _args: tuple) -> None:
            if threading.current_thread().name == "model-thread" and isinstance(module, torch.nn.Embedding):
                calls[0] += 1
                action(calls[0])

        handles.append(torch.nn.modules.module.register_module_forward_pre_hook(hook))

    yield install
    for handle in handles:
        handle.remove()


def test_restart_finds_the_conversation_intact(tiny_settings, open_window, ui, app_paths) -> None:
    tiny_settings()
    first = open_window()
    ui.send(first, "Remember this")
    conversation = first.chat.current_id
    before = [(m.role, m.content, m.mode, m.status) for m in ui.stored(first)]
    first.close()

    second = open_window(wait_for_model=False)
    assert second.history.ids() == [conversation]
    second.history.list.setCurrentRow(1)  # row 0 is the "Today" heading
    assert second.chat.current_id == conversation
    assert [(m.role, m.content, m.mode, m.status) for m in ui.stored(second)] == before
    assert [w.text for w in second.chat_view.messages] == [b[1] for b in before]


def test_corrupt_settings_file_is_reported_and_defaults_used(open_window, app_paths, qtbot) -> None:
    (app_paths.config_dir / SETTINGS_FILE).write_text("{ not json", encoding="utf-8")
    window = open_window(wait_for_model=False)
    assert "could not be used" in window.notice.text
    assert window.settings.current.source.kind == "default"
    assert len(list(app_paths.config_dir.glob("settings.invalid-*.json"))) == 1
    window.load_panel.cancel.click()  # no need to load the real default model here
    qtbot.waitUntil(lambda: window.load_panel.retry.isVisibleTo(window) or window.model is not None, timeout=60_000)


def test_generation_crash_keeps_the_partial_answer_marked_interrupted(
    tiny_settings, open_window, ui, forward_hook
) -> None:
    tiny_settings(max_new_tokens=30, mode="plain")

    def crash(call: int) -> None:
        if call == 12:
            raise RuntimeError("simulated crash in the decoding loop")

    window = open_window()
    forward_hook(crash)  # counts the answer's forward passes, not the load's measurement
    ui.send(window, "Go")
    answer = ui.stored(window)[-1]
    assert answer.status == "interrupted"
    assert answer.content and answer.stats["new_tokens"] == 11
    assert "simulated crash" in window.notice.text
    assert window.chat_view.messages[-1].status.text() == "interrupted"
    ui.send(window, "Still working?")  # the worker survived
    assert ui.stored(window)[-1].status == "truncated"  # ended normally, at the token limit


def test_out_of_memory_keeps_the_text_and_suggests_what_to_do(tiny_settings, open_window, ui, forward_hook) -> None:
    tiny_settings(max_new_tokens=30)
    window = open_window()
    forward_hook(
        lambda call: (_ for _ in ()).throw(torch.OutOfMemoryError("CUDA out of memory")) if call == 6 else None
    )
    ui.send(window, "Go")
    answer = ui.stored(window)[-1]
    assert answer.status == "interrupted" and answer.content
    assert "smaller lookahead window" in window.notice.text and "4-bit" in window.notice.text


def test_process_death_mid_answer_leaves_the_saved_part_marked_interrupted(
    tiny_settings, open_window, ui, forward_hook, app_paths
) -> None:
    tiny_settings(max_new_tokens=600, mode="plain")
    forward_hook(lambda call: time.sleep(0.01))
    window = open_window()
    ui.send(window, "Write a lot", wait=False)
    ui.qtbot.waitUntil(lambda: window.chat.live is not None and bool(window.chat.live.saved_text), timeout=30_000)
    saved = window.chat.live.saved_text
    # What a crash leaves behind is the database as it is now: open it as the next start would.
    after_crash = HistoryStore.in_folder(app_paths.data_dir)
    answer = after_crash.messages(window.chat.current_id)[-1]
    after_crash.close()
    assert answer.status == "interrupted"
    assert answer.content.startswith(saved[: len(answer.content)]) and len(answer.content) > 0
    window.chat.stop()
    ui.wait_idle(window)


def test_closing_mid_answer_saves_and_stops_the_worker(tiny_settings, open_window, ui, forward_hook, app_paths) -> None:
    tiny_settings(max_new_tokens=600, mode="plain")
    forward_hook(lambda call: time.sleep(0.01))
    window = open_window()
    ui.send(window, "Write a lot", wait=False)
    ui.wait_text(window)
    conversation = window.chat.current_id
    window.close()  # how fast: tests/app/probe_responsiveness.py measures it on a real model
    assert not window.worker.running  # the worker stopped within the close (it waits at most SHUTDOWN_S)
    store = HistoryStore.in_folder(app_paths.data_dir)
    answer = store.messages(conversation)[-1]
    store.close()
    assert answer.status == "interrupted" and answer.content


def test_full_disk_when_saving_is_shown_and_the_app_keeps_running(tiny_settings, open_window, ui) -> None:
    tiny_settings()
    window = open_window()
    ui.send(window, "Hello")
    connection = window.store.connection
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count = {pages}")
    window.composer.box.setPlainText("x " * 60_000)
    window.composer.submit()
    assert "disk is full" in window.notice.text
    assert not window.chat.busy
    assert window.composer.box.toPlainText().startswith("x x")  # the text is not lost
    connection.execute("PRAGMA max_page_count = 1073741823")
    ui.send(window, "Now it fits")
    assert ui.stored(window)[-1].status == "truncated"  # ended normally, at the token limit


def test_context_overflow_leaves_out_old_turns_and_says_so(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=16)
    window = open_window()
    conversation = window.store.create_conversation("Long")
    for i in range(3):
        window.store.add_message(conversation.id, "user", f"question {i} " + "word " * 300)
        window.store.add_message(conversation.id, "assistant", f"answer {i} " + "word " * 300)
    window.refresh_conversations()
    window.history.list.setCurrentRow(1)
    ui.send(window, "And now?")
    note = window.chat_view.messages[-1].note
    assert note.isVisibleTo(window) and "left out to fit the model's context" in note.text()


def test_load_failure_is_shown_and_the_app_stays_usable(tiny_settings, open_window, qtbot, app_paths, tmp_path) -> None:
    from core.models.options import ModelSource

    tiny_settings()
    window = open_window()
    broken = window.settings.current.__class__(
        **{**window.settings.current.__dict__, "source": ModelSource("folder", str(tmp_path / "missing"))}
    )
    window.apply_settings(broken)
    qtbot.waitUntil(lambda: window.load_panel.retry.isVisibleTo(window), timeout=30_000)
    assert "missing" in window.load_panel.label.text()
    assert window.model is None
    window.new_chat()  # history and settings stay usable
    assert window.composer.isEnabled()


def test_a_folder_in_place_of_the_history_is_set_aside_and_the_session_keeps_its_chats(
    tiny_settings, open_window, ui, app_paths
) -> None:
    tiny_settings(max_new_tokens=8)
    (app_paths.data_dir / "history.sqlite3").mkdir(parents=True)  # a folder where the database should be
    window = open_window()
    [aside] = app_paths.data_dir.glob("history.foreign-*")
    assert aside.is_dir() and str(aside) in window.notice.text and "new, empty history" in window.notice.text
    ui.send(window, "Hello anyway")
    assert ui.stored(window)[-1].status == "truncated"  # ended normally, at the token limit
    stored = HistoryStore(app_paths.data_dir / "history.sqlite3")  # kept on disk, not only in memory
    assert [m.content for m in stored.messages(window.chat.current_id)][0] == "Hello anyway"


def test_damaged_history_is_set_aside_and_the_notice_stays_until_dismissed(
    tiny_settings, open_window, ui, app_paths
) -> None:
    tiny_settings(max_new_tokens=8)
    path = app_paths.data_dir / "history.sqlite3"
    old = HistoryStore(path)
    conv = old.create_conversation("Long chat")
    for i in range(60):
        old.add_message(conv.id, "user", f"message {i} " + "x" * 500)
    old.close()
    damaged = path.read_bytes()[:8192]  # `head -c 8192 history.sqlite3` (issue 15)
    path.write_bytes(damaged)
    window = open_window()
    [aside] = app_paths.data_dir.glob("history.damaged-*.sqlite3")
    assert aside.read_bytes() == damaged
    notice = window.notice.text
    assert str(aside) in notice and "new, empty history" in notice
    ui.send(window, "Hello after the damage")
    assert window.notice.text == notice  # a new answer does not sweep it away
    stored = HistoryStore(app_paths.data_dir / "history.sqlite3")  # saved in the new file, not in memory
    assert [m.content for m in stored.messages(window.chat.current_id)][0] == "Hello after the damage"
    stored.close()
    window.notice.close_button.click()
    assert window.notice.text == "" and not window.notice.isVisible()


def fill_the_disk(connection: sqlite3.Connection) -> None:
    """No room left in the history: its size capped where it is, and its pages filled with messages of a
    chat of their own (packed next to the newest, so a message that grows needs a page there is not)."""
    filler = connection.execute("INSERT INTO conversations (title, created, updated) VALUES ('filler', 0, 0)")
    connection.execute(f"PRAGMA max_page_count = {connection.execute('PRAGMA page_count').fetchone()[0]}")
    insert = "INSERT INTO messages (conversation_id, role, content, created) VALUES (?, 'user', ?, 0)"
    for size in (4096, 512, 64, 8, 1):
        try:
            while True:
                connection.execute(insert, (filler.lastrowid, "x" * size))
        except sqlite3.OperationalError as err:
            assert "full" in str(err)


def test_a_full_disk_is_logged_once_while_the_answer_waits_to_be_saved(
    tiny_settings, open_window, ui, qtbot, caplog
) -> None:
    tiny_settings()
    window = open_window()
    ui.send(window, "Hello", wait=False)  # the answer is stored empty, and saved as it grows
    fill_the_disk(window.store.connection)
    with caplog.at_level(logging.WARNING, logger="app.chat.controller"):
        ui.wait_idle(window)
        qtbot.wait(3500)  # the final save is retried every second meanwhile
        assert "disk is full" in window.notice.text
        assert ui.stored(window)[-1].status == "generating"  # not saved yet
        warnings = [r for r in caplog.records if r.name == "app.chat.controller"]
        assert len(warnings) == 1 and "disk is full" in warnings[0].getMessage()
        window.store.connection.execute("PRAGMA max_page_count = 1073741823")
        qtbot.waitUntil(lambda: ui.stored(window)[-1].status == "truncated", timeout=5_000)  # the retry saved it
        assert ui.stored(window)[-1].content == window.chat_view.messages[-1].text
