"""The middleware in front of every route: Host and Origin, the API key, error objects for every refusal, the log.

Every refusal is an OpenAI-style error object with a 4xx code (the HTTP library's own refusals,
such as an unknown path or a body over the limit, included); an unexpected failure of the server
itself is a 500 object for that request, never a dropped connection or a stopped server.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from core.server.access import check_host, check_origin, preflight
from core.server.activity import Activity, RequestRecord
from core.server.config import ServerConfig
from core.server.errors import ApiError, from_status

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class _Outcome:
    """What the request log says about one request; ``gone`` when the client left mid-stream."""

    status: int = 500
    tokens: int = 0
    detail: str = ""
    gone: bool = False


OUTCOME = web.RequestKey("outcome", _Outcome)
"""Where a handler notes what the request log should say (tokens, decoding mode, a client gone)."""


def guard(config: ServerConfig, activity: Activity):
    """Checks Host, Origin and the API key, turns every refusal into an error object, records the request."""

    @web.middleware
    async def checked(request: web.Request, handler: Handler) -> web.StreamResponse:
        began = time.monotonic()
        activity.begin()
        outcome = request[OUTCOME] = _Outcome()
        try:
            check_host(request, config)
            check_origin(request, config)
            if (answer := preflight(request)) is not None:
                outcome.status = answer.status
                return answer
            if config.api_key and not _authorized(request, config.api_key):
                raise ApiError(
                    401,
                    "Missing or wrong API key: send 'Authorization: Bearer <key>' with the key set "
                    "in Settings, Server.",
                    code="invalid_api_key",
                )
            response = await handler(request)
            outcome.status = 499 if outcome.gone else response.status
            return response
        except ApiError as err:
            return _error(request, err)
        except web.HTTPException as err:
            return _error(request, from_status(err.status, err.text or err.reason))
        except asyncio.CancelledError:
            outcome.status = 499  # the client closed the connection
            raise
        except Exception as err:  # a bug answers 500 for this request and leaves the server serving
            log.exception("the server failed on %s %s", request.method, request.path)
            return _error(
                request, ApiError(500, f"The server failed ({type(err).__name__}). Try again.", kind="server_error")
            )
        finally:
            activity.end(
                RequestRecord(
                    time.time(),
                    request.method,
                    request.path,
                    outcome.status,
                    time.monotonic() - began,
                    outcome.tokens,
                    outcome.detail,
                )
            )

    return checked


def _authorized(request: web.Request, key: str) -> bool:
    given = request.headers.get("Authorization", "")
    scheme, _, token = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())


def _error(request: web.Request, err: ApiError) -> web.Response:
    request[OUTCOME].status, request[OUTCOME].detail = err.status, err.message
    return web.json_response(err.body(), status=err.status)
