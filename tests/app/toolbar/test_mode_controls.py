"""The toolbar's decoding mode in the real window with the tiny model: the three modes, fixed W, N, G, the look."""

from __future__ import annotations

import math

import pytest

from app.window.shortcuts import SHORTCUTS


def test_mode_toggle_applies_to_the_next_answer_and_is_recorded(tiny_settings, open_window, ui) -> None:
    tiny_settings(mode="lookahead")
    window = open_window()
    window.mode_controls.plain.click()
    ui.send(window, "one")
    window.mode_controls.lookahead.click()
    ui.send(window, "two")
    modes = [m.mode for m in ui.stored(window) if m.role == "assistant"]
    assert modes[0] == "plain"
    assert modes[1].startswith("lookahead W")
    assert window.settings.current.mode == "lookahead"
    assert "lookahead W" in window.chat_view.messages[-1].figures.text()


def test_fixed_lookahead_settings_are_one_click_away(tiny_settings, open_window, ui) -> None:
    tiny_settings(mode="lookahead")
    window = open_window()
    editor = window.mode_controls.editor
    editor.auto.setChecked(False)
    editor.window.setValue(3)
    editor.ngram.setValue(3)
    editor.guesses.setValue(2)
    assert window.mode_controls.settings_button.text() == "W3 N3 G2"
    ui.send(window, "hi")
    assert ui.stored(window)[-1].mode == "lookahead W3 N3 G2"


def test_ctrl_l_cycles_the_three_modes_as_help_says(tiny_settings, open_window) -> None:
    tiny_settings(mode="auto")
    window = open_window()
    modes = window.mode_controls
    seen = []
    for _ in range(3):
        window.shortcut_actions["toggle_mode"].trigger()
        seen.append(modes.mode)
    assert seen == ["plain", "lookahead", "auto"] and window.settings.current.mode == "auto"
    [help_line] = [s.description for s in SHORTCUTS if s.name == "toggle_mode"]
    named = [modes.auto.text(), modes.plain.text(), modes.lookahead.text()]
    assert all(name in help_line for name in named), help_line
    assert sorted(named, key=help_line.index) == named  # in the order Ctrl+L goes through them


def mean_color(button) -> tuple[float, float, float]:
    image = button.grab().toImage()
    pixels = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
    return tuple(sum(getattr(p, part)() for p in pixels) / len(pixels) for part in ("red", "green", "blue"))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_checked_mode_stands_out_in_both_themes(theme, tiny_settings, open_window) -> None:
    tiny_settings(mode="plain", theme=theme)
    window = open_window()
    background = window.palette().window().color()
    modes = window.mode_controls

    def contrast(button) -> float:  # how far a button's pixels are from the toolbar around it
        red, green, blue = mean_color(button)
        return math.dist((red, green, blue), (background.red(), background.green(), background.blue()))

    for checked in (modes.plain, modes.auto):
        checked.click()
        others = [b for b in (modes.auto, modes.plain, modes.lookahead) if b is not checked]
        assert contrast(checked) > 1.5 * max(contrast(b) for b in others), theme
