"""The server in the status bar: its state at a glance, and its last requests one click away."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from core.server.activity import Activity

SHOWN_IN_TOOLTIP = 8


def requests_text(activity: Activity, limit: int | None = None) -> str:
    """The state line and the last requests, newest first."""
    records = list(activity.recent)[::-1][:limit]
    lines = [f"Server: {activity.state}", f"{activity.active} request(s) in progress"]
    lines += [record.line() for record in records] or ["no requests yet"]
    return "\n".join(lines)


class ServerIndicator(QToolButton):
    """``API :8765 · 2 running`` (hidden while the server is off); click for the request log."""

    def __init__(self, activity: Activity, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.activity = activity
        self.setAutoRaise(True)
        self.log = ServerLog(activity, self)
        self.clicked.connect(self.log.show)
        self.refresh()

    def refresh(self) -> None:
        """Show the current state (the window calls this on each change)."""
        state = self.activity.state
        self.setVisible(state != "stopped" or bool(self.activity.recent))
        if state.startswith("listening on "):
            text = f"API {state.removeprefix('listening on ').removesuffix('/v1').removeprefix('http://')}"
            if self.activity.active:
                text += f" · {self.activity.active} running"
        else:
            text = f"API {state.split(':')[0]}"
        self.setText(text)
        self.setToolTip(requests_text(self.activity, SHOWN_IN_TOOLTIP))
        if self.log.isVisible():
            self.log.refresh()


class ServerLog(QDialog):
    """The server's state and its last requests (status, time, tokens, decoding mode or error)."""

    def __init__(self, activity: Activity, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Local API server")
        self.resize(640, 360)
        self.activity = activity
        self.text = QPlainTextEdit(readOnly=True)
        QVBoxLayout(self).addWidget(self.text)

    def showEvent(self, event) -> None:
        self.refresh()
        super().showEvent(event)

    def refresh(self) -> None:
        self.text.setPlainText(requests_text(self.activity))
