"""Sampling presets from the toolbar, in the real window with the tiny model: choose, save, delete, a damaged file."""

from __future__ import annotations

from dataclasses import replace

from core.presets import BUILTIN, PRESETS_FILE, PresetStore
from core.settings import SettingsStore


def test_presets_from_the_toolbar(tiny_settings, open_window, ui, app_paths) -> None:
    tiny_settings()
    window = open_window()
    controls = window.preset_controls
    assert controls.combo.currentText() == "Custom"  # the tests' 24-token limit matches no preset
    assert [controls.combo.itemText(i) for i in range(3)] == ["Precise", "Balanced", "Creative"]
    controls.combo.setCurrentIndex(1)
    controls.combo.activated.emit(1)
    assert window.settings.current.sampling == BUILTIN[1].sampling
    assert SettingsStore(app_paths.config_dir).load().settings.sampling == BUILTIN[1].sampling
    assert not controls.delete_action.isEnabled()  # built-in presets stay

    mine = replace(BUILTIN[1].sampling, temperature=0.3, max_new_tokens=6, seed=3)
    window.apply_settings(replace(window.settings.current, sampling=mine))  # as the Settings dialog does
    assert controls.combo.currentText() == "Custom"
    assert not controls.save_as("Balanced")
    assert "built-in" in window.notice.text
    assert controls.save_as("Short and warm")
    assert controls.combo.currentText() == "Short and warm" and controls.delete_action.isEnabled()
    ui.send(window, "hi")
    assert ui.stored(window)[-1].stats["new_tokens"] <= 6
    window.close()

    again = open_window(wait_for_model=False)
    assert again.preset_controls.combo.currentText() == "Short and warm"
    assert PresetStore(app_paths.config_dir).load().user[0].sampling == mine
    again.preset_controls.combo.activated.emit(0)
    assert again.settings.current.sampling == BUILTIN[0].sampling
    assert again.preset_controls.delete("Short and warm")
    assert PresetStore(app_paths.config_dir).load().user == ()
    assert again.preset_controls.combo.count() == 3


def test_a_damaged_presets_file_is_reported_and_the_window_still_opens(tiny_settings, open_window, app_paths) -> None:
    tiny_settings()
    (app_paths.config_dir / PRESETS_FILE).write_text(
        '{"presets": [{"name": "x", "sampling": {"top_p": 7}}]}', encoding="utf-8"
    )
    window = open_window(wait_for_model=False)
    assert "presets file could not be used" in window.notice.text
    assert window.preset_controls.combo.count() == 4  # the built-in ones and Custom
    assert len(list(app_paths.config_dir.glob("presets.invalid-*.json"))) == 1
