"""A request's body: declared as JSON, within the size limit, whole within the body timeout.

Requiring ``application/json`` keeps web pages out a second way: a page can send a form or
``text/plain`` anywhere, but a JSON body only after a CORS preflight this server answers only
for the origins the user trusts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from core.server.config import ServerConfig
from core.server.errors import ApiError
from core.server.protocol import parse_json


async def json_body(request: web.Request, config: ServerConfig) -> dict[str, Any]:
    """The body as a JSON object, or a 415, 413, 408 or 400 that says what to send instead."""
    if request.content_type != "application/json":
        given = request.headers.get("Content-Type")
        got = f"got {given!r}" if given else "got no Content-Type"
        raise ApiError(
            415,
            f"Send the body as JSON with the header 'Content-Type: application/json' ({got}).",
            code="unsupported_media_type",
        )
    if request.content_length is not None and request.content_length > config.max_body_bytes:
        raise ApiError(
            413,
            f"The body is {request.content_length} bytes; at most {config.max_body_bytes} are accepted.",
            code="request_too_large",
        )
    try:
        body = await asyncio.wait_for(request.read(), config.body_timeout_s)
    except TimeoutError:
        raise ApiError(
            408,
            f"The request body did not arrive within {config.body_timeout_s:g} s; send it whole, at once.",
            code="request_timeout",
        ) from None
    return parse_json(body)
