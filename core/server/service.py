"""Start and stop the server on the running asyncio loop (the window's qasync loop, or ``serve``'s own)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from core.server.activity import Activity
from core.server.answer_events import AnswerDefaults
from core.server.config import ServerConfig
from core.server.connections import CappedSite
from core.server.model_runner import ModelRunner
from core.server.routes import make_app

log = logging.getLogger(__name__)

SHUTDOWN_S = 1.0  # requests still running when the server stops get this long, then are cancelled


class ServerStartError(OSError):
    """The server could not listen (port in use, no permission); the message says what to do."""


class LocalServer:
    """The OpenAI-compatible server over ``runner``; :attr:`activity` tells its state and last requests."""

    def __init__(
        self,
        runner: ModelRunner,
        defaults: Callable[[], AnswerDefaults],
        config: ServerConfig,
        activity: Activity | None = None,
    ) -> None:
        self.runner, self.defaults, self.config = runner, defaults, config
        self.activity = activity or Activity()
        self.port: int | None = None
        self._web: web.AppRunner | None = None
        self._site: CappedSite | None = None

    @property
    def url(self) -> str:
        """The API's base URL, e.g. ``http://127.0.0.1:8765/v1`` (after :meth:`start`)."""
        return f"http://{self.config.host}:{self.port}/v1"

    @property
    def open_connections(self) -> int:
        """Connections open now (at most ``config.max_connections``)."""
        return self._site.open_connections if self._site is not None else 0

    async def start(self) -> None:
        """Listen; raises :class:`ServerStartError` (and says so in the state) when the port cannot be used."""
        app = make_app(self.runner, self.defaults, self.config, self.activity)
        self._web = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_S)
        await self._web.setup()
        self._site = CappedSite(self._web, self.config)
        try:
            await self._site.start()
        except OSError as err:
            await self.stop()
            message = (
                f"could not listen on {self.config.host}:{self.config.port} ({err.strerror or err}); "
                "choose another port in Settings, Server (or --port)."
            )
            self.activity.set_state(f"failed: {message}")
            raise ServerStartError(message) from err
        self.port = self._web.addresses[0][1]
        self.activity.set_state(f"listening on {self.url}")
        log.info("serving the OpenAI-compatible API on %s", self.url)

    async def stop(self) -> None:
        """Stop listening; requests still running are cancelled (their answers stop within one step)."""
        if self._web is not None:
            runner, self._web = self._web, None
            await runner.cleanup()
        self._site = None
        self.port = None
        self.activity.set_state("stopped")
