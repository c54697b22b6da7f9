"""The toolbar's sampling preset: a combo box of the presets, and a menu to save or delete the user's own."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QInputDialog, QLabel, QMenu, QToolButton, QWidget

from core.presets import BUILTIN, Preset, PresetStore, matching, saved
from core.settings import SamplingSettings

CUSTOM = "Custom"  # shown when the sampling settings match no preset


class PresetControls(QWidget):
    """Picks a preset (``chosen`` carries its sampling settings); saves and deletes the user's presets."""

    chosen = Signal(object)  # SamplingSettings
    error = Signal(str)

    def __init__(
        self, store: PresetStore, user: tuple[Preset, ...], sampling: SamplingSettings, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.user = user
        self.sampling = sampling
        self.combo = QComboBox(toolTip="Sampling preset: temperature, top-k/p, min-p, repetition penalty, token limit")
        self.combo.setMinimumContentsLength(10)
        self.combo.activated.connect(self._activated)
        self.menu_button = QToolButton(
            text="…", toolTip="Save the current sampling settings as a preset, or delete one"
        )
        self.menu_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.menu_button)
        self.save_action = QAction("Save current settings as a preset…", self)
        self.save_action.triggered.connect(self._ask_name)
        self.delete_action = QAction("Delete this preset", self)
        self.delete_action.triggered.connect(lambda: self.delete(self.combo.currentText()))
        menu.addActions([self.save_action, self.delete_action])
        self.menu_button.setMenu(menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(QLabel("Preset "))
        layout.addWidget(self.combo)
        layout.addWidget(self.menu_button)
        self.show_sampling(sampling)

    @property
    def presets(self) -> tuple[Preset, ...]:
        return (*BUILTIN, *self.user)

    def show_sampling(self, sampling: SamplingSettings) -> None:
        """Select the preset matching ``sampling`` (``Custom`` when none does)."""
        self.sampling = sampling
        current = matching(self.presets, sampling)
        self.combo.blockSignals(True)
        self.combo.clear()
        for preset in self.presets:
            self.combo.addItem(preset.name, preset)
        if current is None:
            self.combo.addItem(CUSTOM, None)
            self.combo.setCurrentIndex(self.combo.count() - 1)
        else:
            self.combo.setCurrentIndex(self.presets.index(current))
        self.combo.blockSignals(False)
        self.delete_action.setEnabled(current is not None and not current.builtin)

    def save_as(self, name: str) -> bool:
        """Save the current sampling settings as the user's preset ``name`` (replacing one of that name)."""
        try:
            user = saved(self.user, name, self.sampling)
            self.store.save(user)
        except ValueError as err:
            self.error.emit(str(err))
            return False
        except OSError as err:
            self.error.emit(
                f"Could not save the presets ({err.strerror or err}). Free disk space or check the folder "
                f"{self.store.path.parent}."
            )
            return False
        self.user = user
        self.show_sampling(self.sampling)
        return True

    def delete(self, name: str) -> bool:
        """Delete the user's preset ``name`` (built-in ones stay)."""
        user = tuple(p for p in self.user if p.name != name)
        if user == self.user:
            return False
        try:
            self.store.save(user)
        except OSError as err:
            self.error.emit(f"Could not save the presets ({err.strerror or err}).")
            return False
        self.user = user
        self.show_sampling(self.sampling)
        return True

    def _activated(self, index: int) -> None:
        preset = self.combo.itemData(index)
        if isinstance(preset, Preset):
            self.show_sampling(preset.sampling)
            self.chosen.emit(preset.sampling)

    def _ask_name(self) -> None:
        current = matching(self.user, self.sampling)
        name, ok = QInputDialog.getText(
            self, "Save preset", "Name for the current sampling settings:", text=current.name if current else ""
        )
        if ok:
            self.save_as(name)
