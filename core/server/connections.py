"""The listening socket: at most so many connections open, slow ones closed, aiohttp's own refusals as error objects.

Without this, every half-sent request head held its connection (and a file descriptor) for an
hour: aiohttp closes a connection that has not sent a whole head within its keep-alive timeout,
counted from the connection's opening or its last answer, so that timeout is the header timeout.
A connection over the cap is answered 429 at once and closed within a second (at once when as
many are being refused), so the cap bounds the descriptors, whatever the rate of connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus

from aiohttp import http_exceptions, web

from core.server.config import ServerConfig
from core.server.errors import ApiError, from_status

log = logging.getLogger(__name__)

LINGER_S = 2.0  # after an answer to a request whose body was not read, how long its rest is read and dropped
REFUSED_LINGER_S = 1.0  # how long a connection over the cap may take to close after its 429

READ_FAILURES = {  # why aiohttp could not read the bytes as a request, said plainly
    http_exceptions.LineTooLong: "a line of its head is longer than 8190 bytes",
    http_exceptions.BadHttpMethod: "it does not start with an HTTP method (this port speaks HTTP, not HTTPS)",
    http_exceptions.BadStatusLine: "its first line is not an HTTP request line",
    http_exceptions.InvalidHeader: "a header is not valid",
    http_exceptions.InvalidURLError: "its URL is not valid",
}


class CappedSite(web.BaseSite):
    """A TCP site whose connections pass a gate: at most ``config.max_connections`` open at once."""

    __slots__ = ("_config", "_handlers", "_refusing")

    def __init__(self, runner: web.BaseRunner, config: ServerConfig) -> None:
        super().__init__(runner)
        self._config = config
        self._handlers: set[_Handler] = set()
        self._refusing: set[_Refused] = set()  # refused, waiting for the client to close (as many at most)

    @property
    def name(self) -> str:
        return f"http://{self._config.host}:{self._config.port}"

    @property
    def open_connections(self) -> int:
        return len(self._handlers)

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._connect, self._config.host, self._config.port, backlog=self._backlog
        )

    async def stop(self) -> None:
        await super().stop()
        for refused in list(self._refusing):  # the runner closes aiohttp's connections, these are ours
            refused.close()

    def _connect(self) -> asyncio.BaseProtocol:
        """The protocol for a new connection: aiohttp's, or the refusal when the cap is reached."""
        limit = self._config.max_connections
        if len(self._handlers) >= limit:
            return _Refused(limit, self._refusing if len(self._refusing) < limit else None)
        manager = self._runner.server
        assert manager is not None  # the runner is set up before any site starts
        handler = _Handler(
            self._handlers,
            manager,
            loop=asyncio.get_running_loop(),
            keepalive_timeout=self._config.header_timeout_s,
            lingering_time=LINGER_S,
            access_log=None,
        )
        self._handlers.add(handler)
        return handler


class _Handler(web.RequestHandler):
    """aiohttp's connection handler, counted while open; what it cannot read as a request gets an error object."""

    __slots__ = ("_open",)

    def __init__(self, open_handlers: set[_Handler], manager: web.Server, **options) -> None:
        super().__init__(manager, **options)
        self._open = open_handlers

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        self._open.discard(self)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The answer to bytes that are not a request aiohttp can read (it closes the connection after it)."""
        if request.writer.output_size > 0:  # as aiohttp's own: an answer had begun, no error object can follow
            raise ConnectionError("the response had begun, so no error object can follow it")
        if status >= 500:
            self.log_exception("the server failed on a request from %s", request.remote, exc_info=exc)
            error = ApiError(status, "The server failed on this request. Try again.", kind="server_error")
        else:
            reason = READ_FAILURES.get(type(exc)) or _first_line(message) or HTTPStatus(status).phrase
            log.info("refused unreadable bytes from %s: %s", request.remote, reason)
            error = from_status(status, f"This is not an HTTP request the server can read: {reason}.")
        response = web.json_response(error.body(), status=status)
        response.force_close()
        return response


class _Refused(asyncio.Protocol):
    """A connection over the cap: a 429 error object, then the close.

    While fewer than the cap are ``waiting``, what the client sent is read and dropped until it
    closes too (at most ``REFUSED_LINGER_S``): closing a socket with bytes unread resets the
    connection, and the client may lose the answer. Past that, it is closed at once.
    """

    def __init__(self, limit: int, waiting: set[_Refused] | None) -> None:
        self.limit, self.waiting = limit, waiting
        self._transport: asyncio.Transport | None = None
        self._close: asyncio.TimerHandle | None = None
        if waiting is not None:
            waiting.add(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        error = ApiError(
            429,
            f"{self.limit} connections to the server are open already; try again when one has closed.",
            kind="rate_limit_error",
            code="too_many_connections",
        )
        body = json.dumps(error.body()).encode()
        head = (
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        if self.waiting is None or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._transport = transport
        self._close = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, self.close)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        """Dropped: the answer is given."""

    def eof_received(self) -> bool:
        return False  # the client has closed its side: close the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._close is not None:
            self._close.cancel()
        if self.waiting is not None:
            self.waiting.discard(self)


def _first_line(message: str | None) -> str:
    lines = (message or "").strip().splitlines()
    return lines[0][:200] if lines else ""
