"""The settings in use: a change signal with the new and the old value, saving through core's store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.settings.live import LiveSettings
from core.settings import SETTINGS_FILE, SamplingSettings, Settings, SettingsStore


def recorded(settings: LiveSettings) -> list[tuple[Settings, Settings]]:
    changes: list[tuple[Settings, Settings]] = []
    settings.changed.connect(lambda new, old: changes.append((new, old)))
    return changes


def test_a_change_is_saved_and_signalled_with_the_new_and_the_old_settings(qtbot, tmp_path: Path) -> None:
    store = SettingsStore(tmp_path)
    first = Settings()
    settings = LiveSettings(first, store)
    changes = recorded(settings)
    settings.update(mode="plain")
    assert settings.current == replace(first, mode="plain")
    assert changes == [(settings.current, first)]
    assert store.load().settings == settings.current
    short = replace(settings.current, sampling=SamplingSettings(max_new_tokens=8))
    settings.set(short)
    assert changes[-1] == (short, replace(first, mode="plain")) and len(changes) == 2


def test_the_same_settings_again_are_saved_but_signal_no_change(qtbot, tmp_path: Path) -> None:
    store = SettingsStore(tmp_path)
    settings = LiveSettings(Settings(theme="dark"), store)
    changes = recorded(settings)
    settings.set(Settings(theme="dark"))  # as the Settings dialog's OK without an edit
    assert changes == []
    assert store.load().settings.theme == "dark"  # written, as the window always did


def test_a_failed_save_is_reported_and_the_new_settings_still_apply(qtbot, tmp_path: Path) -> None:
    (tmp_path / SETTINGS_FILE).mkdir()  # a folder where the file should be: the save fails
    settings = LiveSettings(Settings(), SettingsStore(tmp_path))
    problems: list[str] = []
    settings.save_failed.connect(problems.append)
    changes = recorded(settings)
    settings.update(theme="dark")
    assert settings.current.theme == "dark" and len(changes) == 1
    assert len(problems) == 1 and "Could not save the settings" in problems[0] and str(tmp_path) in problems[0]


def test_without_a_store_the_settings_live_in_memory(qtbot) -> None:
    settings = LiveSettings(Settings())
    changes = recorded(settings)
    settings.update(system_prompt="Be brief.")
    assert settings.current.system_prompt == "Be brief." and len(changes) == 1
