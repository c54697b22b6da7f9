"""What the server is doing: its state line and its last requests, for the window and the log."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

RECENT = 50


@dataclass(frozen=True)
class RequestRecord:
    """One finished request; ``status`` 499 is a client that went away before the end."""

    at: float  # time.time()
    method: str
    path: str
    status: int
    seconds: float
    completion_tokens: int = 0
    detail: str = ""  # the decoding mode, or the error's message

    def line(self) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(self.at))
        tokens = f" · {self.completion_tokens} tokens" if self.completion_tokens else ""
        detail = f" · {self.detail}" if self.detail else ""
        return f"{clock} {self.method} {self.path} → {self.status} · {self.seconds:.2f} s{tokens}{detail}"


class Activity:
    """The state line (``stopped``, ``listening on ...``, ``failed: ...``), requests in flight, the last requests.

    Touched only on the server's event loop thread; ``on_change`` is called there after each change.
    """

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self.state = "stopped"
        self.active = 0
        self.recent: deque[RequestRecord] = deque(maxlen=RECENT)
        self.on_change = on_change

    def set_state(self, state: str) -> None:
        self.state = state
        self._changed()

    def begin(self) -> None:
        self.active += 1
        self._changed()

    def end(self, record: RequestRecord) -> None:
        self.active -= 1
        self.recent.append(record)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
