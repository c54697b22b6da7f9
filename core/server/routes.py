"""The aiohttp application: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``.

Refusals raise :class:`ApiError`; :mod:`core.server.guard` turns them into error objects. A client
that goes away (the connection closes, so aiohttp cancels its handler, or a write fails) cancels
its answer's token: the model stops within one step, or skips the job if it has not started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from core.progress import CancelToken
from core.server.access import add_cors_headers
from core.server.activity import Activity
from core.server.answer_events import AnswerDefaults, Delta, Ended, Event, ServerAnswer, Started
from core.server.body import json_body
from core.server.config import ServerConfig
from core.server.errors import ApiError
from core.server.guard import OUTCOME, guard
from core.server.model_runner import ModelRunner
from core.server.protocol import CompletionRequest, parse_chat, parse_completion
from core.server.responses import MODE_HEADER, TOKENS_PER_STEP_HEADER, Shapes, sse

Parse = Callable[[dict[str, Any], int], CompletionRequest]
CANCELLED = (
    "The answer was cancelled before it ended (the model is being replaced or the app is closing). Send it again."
)


def make_app(
    runner: ModelRunner, defaults: Callable[[], AnswerDefaults], config: ServerConfig, activity: Activity
) -> web.Application:
    """The application; ``defaults`` is asked for the app's settings at each request."""
    routes = _Routes(runner, defaults, config)
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[guard(config, activity)])
    app.on_response_prepare.append(add_cors_headers)
    app.router.add_get("/v1/models", routes.models)
    app.router.add_get("/v1/models/{model}", routes.model)
    app.router.add_post("/v1/chat/completions", routes.chat)
    app.router.add_post("/v1/completions", routes.completions)
    return app


class _Routes:
    def __init__(self, runner: ModelRunner, defaults: Callable[[], AnswerDefaults], config: ServerConfig) -> None:
        self.runner, self.defaults, self.config = runner, defaults, config
        self.pending = 0

    async def models(self, request: web.Request) -> web.Response:
        name = self.runner.model_name
        return web.json_response({"object": "list", "data": [_model(name)] if name else []})

    async def model(self, request: web.Request) -> web.Response:
        name = self._model_named(request.match_info["model"])
        return web.json_response(_model(name))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_chat)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, parse_completion)

    def _model_named(self, wanted: str) -> str:
        name = self.runner.model_name
        if name is None:
            raise ApiError(
                503,
                "No model is loaded yet: wait for it to load, then try again.",
                kind="server_error",
                code="model_not_ready",
            )
        if wanted != name:
            raise ApiError(
                404,
                f"The model {wanted!r} does not exist here; this server runs {name!r} "
                "(GET /v1/models). Choose another model in the app's settings.",
                code="model_not_found",
                param="model",
            )
        return name

    async def _complete(self, request: web.Request, parse: Parse) -> web.StreamResponse:
        wanted = parse(await json_body(request, self.config), self.config.max_tokens)
        name = self._model_named(wanted.model)
        if self.pending >= self.config.max_pending:
            raise ApiError(
                429,
                f"{self.pending} requests are already waiting for the model; try again later.",
                kind="rate_limit_error",
                code="too_many_requests",
            )
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        answer = ServerAnswer(
            wanted, self.defaults(), self.config.max_tokens, lambda event: _post(loop, events, event, answer.cancel)
        )
        self.pending += 1
        try:
            self.runner.submit(answer.job())
            first = await events.get()
            if isinstance(first, Ended):
                raise first.error or ApiError(503, CANCELLED, kind="server_error")
            shapes = Shapes(wanted.chat, name)
            if wanted.stream:
                return await self._stream(request, wanted, shapes, first, events)
            return await self._whole(request, shapes, first, events)
        finally:
            self.pending -= 1
            answer.cancel.cancel()  # the client went away (or the answer is over): stop within one step

    async def _whole(
        self, request: web.Request, shapes: Shapes, started: Started, events: asyncio.Queue[Event]
    ) -> web.Response:
        parts: list[str] = []
        while not isinstance(event := await events.get(), Ended):
            if isinstance(event, Delta):
                parts.append(event.text)
        if event.outcome != "finished":
            raise event.error or ApiError(503, CANCELLED, kind="server_error")
        _note(request, event)
        headers = {
            MODE_HEADER: event.lookahead["mode"],
            TOKENS_PER_STEP_HEADER: f"{event.lookahead['tokens_per_step']:.4f}",
        }
        return web.json_response(shapes.full("".join(parts), event), headers=headers)

    async def _stream(
        self,
        request: web.Request,
        wanted: CompletionRequest,
        shapes: Shapes,
        started: Started,
        events: asyncio.Queue[Event],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", MODE_HEADER: started.mode}
        )
        await response.prepare(request)
        try:
            await response.write(sse(shapes.chunk(first=True)))
            while not isinstance(event := await events.get(), Ended):
                if isinstance(event, Delta) and event.text:
                    await response.write(sse(shapes.chunk(event.text)))
            _note(request, event)
            if event.outcome == "finished":
                await response.write(sse(shapes.chunk(ended=event)))
                if wanted.include_usage:
                    await response.write(sse(shapes.usage_chunk(event)))
            else:
                error = event.error or ApiError(503, CANCELLED, kind="server_error")
                request[OUTCOME].detail = error.message
                await response.write(sse(error.body()))
            await response.write(sse("[DONE]"))
            await response.write_eof()
        except ConnectionError:  # the client closed the stream: the finally above cancels the answer
            request[OUTCOME].gone = True
        return response


def _note(request: web.Request, ended: Ended) -> None:
    request[OUTCOME].tokens, request[OUTCOME].detail = ended.completion_tokens, ended.lookahead.get("mode", "")


def _post(loop: asyncio.AbstractEventLoop, events: asyncio.Queue[Event], event: Event, cancel: CancelToken) -> None:
    """From the model thread: hand ``event`` to the handler on the loop; a closed loop stops the answer."""
    try:
        loop.call_soon_threadsafe(events.put_nowait, event)
    except RuntimeError:  # the loop is closed: nobody will read the answer
        cancel.cancel()


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "lookahead-chat"}
