"""A request's body: within the size limit, whole within the body timeout (a client that never sends it holds nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from core.server.config import ServerConfig
from core.server.errors import ApiError
from core.server.protocol import parse_json


async def json_body(request: web.Request, config: ServerConfig) -> dict[str, Any]:
    """The body as a JSON object, or a 413, 408 or 400 that says what to send instead."""
    if request.content_length is not None and request.content_length > config.max_body_bytes:
        raise ApiError(
            413,
            f"The body is {request.content_length} bytes; at most {config.max_body_bytes} are accepted.",
            code="request_too_large",
        )
    try:
        body = await asyncio.wait_for(request.read(), config.body_timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(
            408,
            f"The request body did not arrive within {config.body_timeout_s:g} s; send it whole, at once.",
            code="request_timeout",
        ) from None
    return parse_json(body)
