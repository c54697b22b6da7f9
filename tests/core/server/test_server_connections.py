"""Hostile connections: bytes that are not HTTP, idle and slow clients, more connections than the cap.

Raw sockets against the real server; each timeout is set short through the server's config.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlparse

import psutil
import pytest

HEADER_TIMEOUT_S = 0.5
HALF_SENT = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"


def connect(served) -> socket.socket:
    url = urlparse(served.base_url)
    return socket.create_connection((url.hostname, url.port), timeout=30)


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def exchange(served, data: bytes) -> tuple[int, dict]:
    """Send ``data`` on a new connection and read the one answer: its status and JSON body."""
    with connect(served) as sock:
        sock.sendall(data)
        return answer(sock)


def answer(sock: socket.socket) -> tuple[int, dict]:
    head, _, body = read_to_end(sock).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert any(line.lower().startswith("content-type: application/json") for line in lines), head
    return int(lines[0].split()[1]), json.loads(body)


def assert_refused(status: int, body: dict, expected: int | None = None) -> None:
    assert 400 <= status < 500 if expected is None else status == expected, (status, body)
    assert set(body["error"]) >= {"message", "type", "param", "code"} and body["error"]["message"]
    assert "\n" not in body["error"]["message"]


@pytest.mark.parametrize(
    "data",
    [
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /v1/" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40,  # a TLS hello on the plain port
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1e12\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: y\r\n" * 200 + b"\r\n",
    ],
)
def test_bytes_that_are_not_an_acceptable_request_get_an_error_object(serve, data):
    assert_refused(*exchange(serve(), data))


def test_half_sent_headers_and_idle_connections_are_closed_within_the_header_timeout(serve):
    served = serve(header_timeout_s=HEADER_TIMEOUT_S, max_connections=20)
    process = psutil.Process()
    before = process.num_fds()
    opened = time.monotonic()
    sockets = [connect(served) for _ in range(60)]
    for n, sock in enumerate(sockets):
        if n % 3:
            sock.sendall(HALF_SENT)  # every third one sends nothing at all
    got, ends = [], []
    for sock in sockets:
        try:
            got.append(read_to_end(sock))
        except ConnectionResetError:  # closed at once, with its bytes unread
            got.append(None)
        ends.append(time.monotonic() - opened)
    assert got[:20] == [b""] * 20  # under the cap: nothing, then the close
    assert None not in got[20:40]  # over it: the refusal at once, and the close when the client closes
    for data in got[20:]:
        if data is not None:  # past twice the cap: closed at once, so the refusal may be lost
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429"), head
            assert_refused(429, json.loads(body), 429)
    assert ends[0] >= HEADER_TIMEOUT_S * 0.9 and max(ends) < HEADER_TIMEOUT_S + 1.0, ends
    for sock in sockets:
        sock.close()
    deadline = time.monotonic() + 5
    while (process.num_fds() > before or served.server.open_connections) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.num_fds() == before and served.server.open_connections == 0
    assert exchange(served, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")[0] == 200


def test_a_kept_alive_connection_is_closed_when_idle_for_the_header_timeout(serve):
    served = serve(header_timeout_s=HEADER_TIMEOUT_S)
    with connect(served) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.1)
        answered = time.monotonic()
        data = read_to_end(sock)
        assert data.startswith(b"HTTP/1.1 200") and b'"object": "list"' in data
        assert HEADER_TIMEOUT_S * 0.5 < time.monotonic() - answered < HEADER_TIMEOUT_S + 1.0


def test_a_body_that_never_comes_is_refused(serve, tiny_runner):
    served = serve(body_timeout_s=HEADER_TIMEOUT_S)
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    began = time.monotonic()
    status, body = exchange(served, f"{head}Content-Length: 1000000000000\r\n\r\n".encode())
    assert_refused(status, body, 413)
    with connect(served) as sock:
        sock.sendall(f'{head}Content-Length: 100\r\n\r\n{{"model": "{tiny_runner.model_name}", '.encode())
        began = time.monotonic()
        status, body = answer(sock)
    assert_refused(status, body, 408)
    assert HEADER_TIMEOUT_S <= time.monotonic() - began < HEADER_TIMEOUT_S + 5.0
    assert tiny_runner.pending == 0
