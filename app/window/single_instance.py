"""One window per data folder: a lock file in the folder, and a local socket to bring that window forward.

A second start over the same folder asks the first to come to the front and exits; it never opens
the history, so it never marks the first one's live answer as interrupted. The command-line
sub-commands (``ask``, ``bench``, ``tune``) do not open the history and may run beside a window.

A folder that cannot be written (a read-only mount) cannot hold the lock file; there the socket
alone tells whether a window has the folder, and the window opens with nothing to save (its
history says so).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

LOCK_FILE = "window.lock"
ACTIVATE = b"activate\n"
CONNECT_MS = 1000


class InstanceLock(QObject):
    """Holds the data folder's window lock; ``activated`` fires when a second start asks for the window."""

    activated = Signal()

    def __init__(self, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.data_dir = data_dir
        self._lock = QLockFile(str(data_dir / LOCK_FILE))
        self._lock.setStaleLockTime(0)  # held as long as its process lives (a dead owner's lock is taken over)
        self._server: QLocalServer | None = None
        self.unwritable = False  # the folder cannot hold the lock file: the socket alone finds a window

    @property
    def server_name(self) -> str:
        """The local socket name, one per data folder (a short hash: socket paths have a length limit)."""
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
        return f"lookahead-chat-{digest}"

    def acquire(self) -> bool:
        """Take the lock and listen for later starts; False when another window has the folder."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the lock file cannot be made then either: the folder cannot be written
        if not self._lock.tryLock(0):
            # a read-only folder fails with PermissionError, or (holding a dead owner's lock file, which
            # cannot be removed) with LockFailedError; only a writable folder's lock means a live owner
            writable = os.access(self.data_dir, os.W_OK)
            if self._lock.error() != QLockFile.LockError.PermissionError and writable:
                return False
            self.unwritable = True
            if self._reachable():
                return False
            log.warning("the data folder %s cannot be written, so it is not locked for this window", self.data_dir)
        QLocalServer.removeServer(self.server_name)  # a socket left by a crashed owner; the folder is ours now
        self._server = QLocalServer(self)
        if not self._server.listen(self.server_name):
            log.warning("a second start cannot reach this window: %s", self._server.errorString())
        self._server.newConnection.connect(self._connected)
        return True

    def owner_pid(self) -> int | None:
        """The process that holds the lock (when another does; unknown for a folder that cannot be written)."""
        if self.unwritable:
            return None
        info = self._lock.getLockInfo()  # PySide6: (pid, hostname, appname)
        pid = info[0] if isinstance(info, tuple) and info else 0
        return pid if isinstance(pid, int) and pid > 0 else None

    def _reachable(self) -> bool:
        """Whether a window listens on this folder's socket."""
        socket = QLocalSocket()
        socket.connectToServer(self.server_name)
        reached = socket.waitForConnected(CONNECT_MS)
        socket.abort()
        return reached

    def activate_owner(self) -> bool:
        """Ask the window that holds the lock to come to the front; True when it was reached."""
        socket = QLocalSocket()
        socket.connectToServer(self.server_name)
        if not socket.waitForConnected(CONNECT_MS):
            return False
        socket.write(ACTIVATE)
        sent = socket.waitForBytesWritten(CONNECT_MS)
        socket.disconnectFromServer()
        return sent

    def release(self) -> None:
        if self._server is not None:
            self._server.close()
        self._lock.unlock()

    def _connected(self) -> None:
        assert self._server is not None
        while (socket := self._server.nextPendingConnection()) is not None:
            socket.readyRead.connect(lambda s=socket: self._read(s))
            socket.disconnected.connect(socket.deleteLater)
            if socket.bytesAvailable():
                self._read(socket)

    def _read(self, socket: QLocalSocket) -> None:
        if bytes(socket.readAll().data()).startswith(ACTIVATE.strip()):
            self.activated.emit()


def second_start_message(lock: InstanceLock) -> tuple[str, int]:
    """What a second start prints, and its exit code, after trying to bring the first window forward."""
    pid = lock.owner_pid()
    owner = f" (process {pid})" if pid else ""
    if lock.activate_owner():
        return f"Lookahead Chat is already running for {lock.data_dir}{owner}; its window was brought to the front.", 0
    return (
        f"error: Lookahead Chat is already running for {lock.data_dir}{owner}, and its window could not be reached. "
        "Switch to it, or close it and start again.",
        1,
    )
