"""The sidebar: search box, New chat, and the conversations grouped by day."""

from __future__ import annotations

import datetime as dt

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtWidgets import QLineEdit, QListWidget, QListWidgetItem, QMenu, QPushButton, QVBoxLayout, QWidget

from core.chat.history import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole


def day_group(timestamp: float, today: dt.date | None = None) -> str:
    """'Today', 'Yesterday', 'Previous 7 days' or 'Older' for a time."""
    today = today or dt.date.today()
    days = (today - dt.date.fromtimestamp(timestamp)).days
    if days <= 0:
        return "Today"
    if days == 1:
        return "Yesterday"
    return "Previous 7 days" if days < 7 else "Older"


class HistoryList(QWidget):
    """Lists conversations; the window does the storing, this widget asks for it through signals."""

    selected = Signal(int)
    new_requested = Signal()
    search_changed = Signal(str)
    rename_requested = Signal(int)
    delete_requested = Signal(int)
    export_requested = Signal(int, str)  # conversation id, "md" or "json"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.search = QLineEdit(placeholderText="Search chats (Ctrl+F)", clearButtonEnabled=True)
        self.new_button = QPushButton("+ New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.list = QListWidget(objectName="conversations")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.search)
        layout.addWidget(self.new_button)
        layout.addWidget(self.list, 1)

        self._search_timer = QTimer(self, singleShot=True, interval=200)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(lambda _text: self._search_timer.start())
        self.new_button.clicked.connect(self.new_requested)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.itemDoubleClicked.connect(lambda item: self._emit_for(item, self.rename_requested))

    def show_conversations(self, conversations: list[Conversation], current: int | None) -> None:
        """Fill the list (grouped by day) and select ``current`` without emitting ``selected``."""
        self.list.blockSignals(True)
        self.list.clear()
        group = None
        for conv in conversations:
            heading = day_group(conv.updated)
            if heading != group:
                group = heading
                header = QListWidgetItem(heading)
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                self.list.addItem(header)
            item = QListWidgetItem(conv.title)
            item.setData(ID_ROLE, conv.id)
            item.setToolTip(f"{conv.title}\nlast message {dt.datetime.fromtimestamp(conv.updated):%Y-%m-%d %H:%M}")
            self.list.addItem(item)
            if conv.id == current:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)

    def ids(self) -> list[int]:
        items = (self.list.item(i) for i in range(self.list.count()))
        return [item.data(ID_ROLE) for item in items if item.data(ID_ROLE) is not None]

    def _current_changed(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if item is not None and item.data(ID_ROLE) is not None:
            self.selected.emit(item.data(ID_ROLE))

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(ID_ROLE) is None:
            return
        conv_id = item.data(ID_ROLE)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename_requested.emit(conv_id))
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(conv_id, "md"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(conv_id, "json"))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete_requested.emit(conv_id))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def _emit_for(self, item: QListWidgetItem, signal: Signal) -> None:
        if item.data(ID_ROLE) is not None:
            signal.emit(item.data(ID_ROLE))
