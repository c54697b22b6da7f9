"""The window's side of the local server: it runs on the window's qasync loop and answers through the window's model worker.

One model in memory: the server's answers are step jobs queued on the same model thread as the
chat's (:class:`core.engine.model_thread.ModelThread`), in arrival order. The HTTP handlers run on the GUI thread (the qasync loop) and do
little there: parse, queue, forward text; tokens reach them via ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, QTimer, Signal

from app.settings.live import LiveSettings
from core.server.activity import Activity
from core.server.answer_events import AnswerDefaults
from core.server.config import ServerConfig
from core.server.model_runner import ModelRunner
from core.server.service import LocalServer, ServerStartError
from core.settings import ServerSettings, Settings

log = logging.getLogger(__name__)


class ServerControl(QObject):
    """Starts, restarts and stops the server to match Settings, Server; ``changed`` fires on any news (state, requests).

    It follows ``settings`` from the start: the server section as it is, then each change of it;
    answers take their defaults (sampling, mode, system prompt) from the settings in use.
    """

    changed = Signal()

    def __init__(self, runner: ModelRunner, settings: LiveSettings, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runner = runner
        self.settings = settings
        self.activity = Activity(on_change=self.changed.emit)
        self.server: LocalServer | None = None
        self._applied: ServerSettings | None = None
        self._switching: asyncio.Task | None = None
        settings.changed.connect(self._settings_changed)
        self.apply(settings.current.server)

    def apply(self, wanted: ServerSettings) -> None:
        """Match ``wanted`` (start, restart on a change, stop) on the next turn of the event loop."""
        if wanted == self._applied:
            return
        self._applied = wanted
        QTimer.singleShot(0, lambda: self._switch_soon(wanted))

    def _settings_changed(self, new: Settings, _old: Settings) -> None:
        self.apply(new.server)

    async def stop(self) -> None:
        """Stop serving now (the window closes); running answers are cancelled."""
        self._applied = None
        if self._switching is not None:
            await self._switching
        await self._switch(None)

    def _switch_soon(self, wanted: ServerSettings) -> None:
        if not wanted.enabled and self.server is None and self._switching is None:
            return  # off and staying off: nothing to do, with or without an event loop
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # only under a bare Qt loop (some tests): the app always runs qasync
            self.activity.set_state("failed: the window's event loop is not running")
            return
        previous = self._switching
        self._switching = loop.create_task(self._after(previous, wanted))

    async def _after(self, previous: asyncio.Task | None, wanted: ServerSettings) -> None:
        if previous is not None:
            await previous
        if wanted == self._applied:  # not superseded by a later change
            await self._switch(wanted)

    async def _switch(self, wanted: ServerSettings | None) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop()
        if wanted is None or not wanted.enabled:
            return
        server = LocalServer(
            self.runner,
            lambda: AnswerDefaults.from_settings(self.settings.current),
            ServerConfig.from_settings(wanted),
            self.activity,
        )
        try:
            await server.start()
        except ServerStartError as err:
            log.warning("the local server did not start: %s", err)
            return
        self.server = server
