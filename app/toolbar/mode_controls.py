"""Toolbar controls: the Auto / Plain / Lookahead toggle and the lookahead settings popup."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QMenu,
    QSpinBox,
    QToolButton,
    QWidget,
    QWidgetAction,
)

from core.settings import LookaheadSettings


class LookaheadEditor(QWidget):
    """Auto, or fixed W (window), N (n-gram size), G (guesses)."""

    changed = Signal(object)  # LookaheadSettings

    def __init__(self, settings: LookaheadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.auto = QCheckBox("Best measured on this machine")
        self.window = QSpinBox(
            minimum=0, maximum=64, toolTip="W: Jacobi columns guessed in parallel (0: verification only)"
        )
        self.ngram = QSpinBox(minimum=2, maximum=16, toolTip="N: n-gram size; a step emits at most N tokens")
        self.guesses = QSpinBox(minimum=0, maximum=64, toolTip="G: n-gram candidates verified per step")
        form = QFormLayout(self)
        form.addRow(self.auto)
        form.addRow("Window W", self.window)
        form.addRow("N-gram N", self.ngram)
        form.addRow("Guesses G", self.guesses)
        self.set_settings(settings)
        self.auto.toggled.connect(self._emit)
        for box in (self.window, self.ngram, self.guesses):
            box.valueChanged.connect(self._emit)

    def set_settings(self, settings: LookaheadSettings) -> None:
        for widget, value in (
            (self.window, settings.window),
            (self.ngram, settings.ngram),
            (self.guesses, settings.guesses),
        ):
            widget.blockSignals(True)
            widget.setValue(value)
            widget.blockSignals(False)
        self.auto.blockSignals(True)
        self.auto.setChecked(settings.auto)
        self.auto.blockSignals(False)
        self._enable()

    def settings(self) -> LookaheadSettings:
        return LookaheadSettings(self.auto.isChecked(), self.window.value(), self.ngram.value(), self.guesses.value())

    def _enable(self) -> None:
        for box in (self.window, self.ngram, self.guesses):
            box.setEnabled(not self.auto.isChecked())

    def _emit(self) -> None:
        self._enable()
        try:
            self.changed.emit(self.settings())
        except ValueError:  # a W, N, G step too large for the decoder: keep the last valid one
            return


class ModeControls(QWidget):
    """( Auto | Plain | Lookahead ) and the lookahead button; changes apply to the next answer.

    Auto runs whatever decodes fastest on this machine, plain decoding included, and says why in
    the status bar; Lookahead always runs lookahead with the settings of the popup.
    """

    mode_changed = Signal(str)
    lookahead_changed = Signal(object)  # LookaheadSettings

    def __init__(self, mode: str, lookahead: LookaheadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.auto = QToolButton(
            text="Auto", checkable=True, toolTip="The fastest exact decoding measured on this machine (Ctrl+L cycles)"
        )
        self.plain = QToolButton(
            text="Plain", checkable=True, toolTip="Plain decoding, one token per step (Ctrl+L cycles)"
        )
        self.lookahead = QToolButton(text="Lookahead", checkable=True, toolTip="Lookahead decoding (Ctrl+L cycles)")
        self._buttons = {"auto": self.auto, "plain": self.plain, "lookahead": self.lookahead}
        self.group = QButtonGroup(self, exclusive=True)
        for button in self._buttons.values():
            button.setObjectName("modeButton")  # the themes fill the checked one with the highlight colour
            self.group.addButton(button)
        self.settings_button = QToolButton(toolTip="Lookahead settings: the best measured here, or W, N, G")
        self.settings_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.editor = LookaheadEditor(lookahead)
        menu = QMenu(self.settings_button)
        action = QWidgetAction(menu)
        action.setDefaultWidget(self.editor)
        menu.addAction(action)
        self.settings_button.setMenu(menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for button in self._buttons.values():
            layout.addWidget(button)
        layout.addSpacing(6)
        layout.addWidget(self.settings_button)
        self.set_mode(mode)
        self._show_lookahead(lookahead)
        for name, button in self._buttons.items():
            button.toggled.connect(lambda on, name=name: on and self._mode(name))
        self.editor.changed.connect(self._lookahead)

    @property
    def mode(self) -> str:
        return next(name for name, button in self._buttons.items() if button.isChecked())

    def set_mode(self, mode: str) -> None:
        self._buttons.get(mode, self.auto).setChecked(True)
        self.settings_button.setEnabled(mode == "lookahead")

    def toggle(self) -> None:
        """Cycle Auto -> Plain -> Lookahead -> Auto."""
        names = list(self._buttons)
        self.set_mode(names[(names.index(self.mode) + 1) % len(names)])

    def _mode(self, mode: str) -> None:
        self.settings_button.setEnabled(mode == "lookahead")
        self.mode_changed.emit(mode)

    def _lookahead(self, settings: LookaheadSettings) -> None:
        self._show_lookahead(settings)
        self.lookahead_changed.emit(settings)

    def _show_lookahead(self, settings: LookaheadSettings) -> None:
        self.settings_button.setText("Best" if settings.auto else settings.fixed.label)
