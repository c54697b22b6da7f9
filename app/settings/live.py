"""The settings in use: one object the window owns, that the window's parts read and subscribe to."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Signal

from core.settings import Settings, SettingsStore


class LiveSettings(QObject):
    """The current :class:`core.settings.Settings`; ``changed(new, old)`` fires when a new value differs.

    Read :attr:`current` when the settings are needed (the next answer, the next comparison);
    connect to ``changed`` to follow them (the server, the theme, the model to load). Every
    :meth:`set` is saved through the :class:`core.settings.SettingsStore` (none: kept in memory
    only, as in tests); a save that fails is reported once by ``save_failed`` with a message for
    the user, and the new settings apply until the app closes.
    """

    changed = Signal(object, object)  # new Settings, old Settings
    save_failed = Signal(str)

    def __init__(self, settings: Settings, store: SettingsStore | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._current = settings
        self.store = store

    @property
    def current(self) -> Settings:
        return self._current

    def set(self, new: Settings) -> None:
        """Use and save ``new``; ``changed`` follows when it differs from the settings in use."""
        old, self._current = self._current, new
        self._save()
        if new != old:
            self.changed.emit(new, old)

    def update(self, **fields: Any) -> None:
        """:meth:`set` the current settings with ``fields`` replaced (``update(mode="plain")``)."""
        self.set(replace(self._current, **fields))

    def _save(self) -> None:
        if self.store is None:
            return
        try:
            self.store.save(self._current)
        except OSError as err:
            self.save_failed.emit(
                f"Could not save the settings ({err.strerror or err}). Free disk space or check the folder "
                f"{self.store.path.parent}; the new settings apply until the app closes."
            )
