"""Who may use the server: no web page the user has not trusted, no host name it does not answer to.

A browser lets any page POST a form or ``text/plain`` body here without asking first (no CORS
preflight), so the page could keep the model busy; it sends such a request with the page's
``Origin``, which is refused unless the user trusts it (Settings, Server). A page that rebinds its
own name to 127.0.0.1 (DNS rebinding) can read answers, but its requests carry its name as
``Host``; only loopback, the address the connection came in on and the names the user allowed are
answered. Programs (curl, the openai client) send no ``Origin`` and a loopback or chosen ``Host``.
"""

from __future__ import annotations

import ipaddress

from aiohttp import web

from core.server.config import ServerConfig
from core.server.errors import ApiError
from core.server.responses import MODE_HEADER, TOKENS_PER_STEP_HEADER

LOOPBACK_NAMES = frozenset({"localhost"})
PREFLIGHT_MAX_AGE_S = 600
TRUSTED_ORIGIN = web.RequestKey("trusted_origin", str)
"""The request's ``Origin`` when the user trusts it: its answer gets CORS headers."""


def check_host(request: web.Request, config: ServerConfig) -> None:
    """A 403 unless ``Host`` names loopback, the address this connection reached, or an allowed name."""
    header = request.headers.get("Host")
    if header is None:  # HTTP/1.0 programs; every browser sends one
        return
    name = _host_name(header)
    if name in LOOPBACK_NAMES or name in config.allowed_hosts or _is_local_address(name, request):
        return
    raise ApiError(
        403,
        f"Requests for the host {name!r} are refused (a web page may be posing as it): connect through "
        f"127.0.0.1 or this computer's address, or add {name!r} to Settings, Server, Allowed host names.",
        code="host_not_allowed",
    )


def check_origin(request: web.Request, config: ServerConfig) -> None:
    """A 403 for a request from a web page whose origin the user does not trust; notes a trusted one."""
    origin = request.headers.get("Origin")
    if origin is None:
        return
    if origin.lower() not in config.allowed_origins:
        raise ApiError(
            403,
            f"Requests from web pages are refused, and this one comes from {origin!r}: if you trust that "
            "web app, add its origin to Settings, Server, Allowed web origins.",
            code="origin_not_allowed",
        )
    request[TRUSTED_ORIGIN] = origin


def preflight(request: web.Request) -> web.Response | None:
    """The answer to a trusted web app's CORS preflight (no API key needed for it); None for any other request."""
    asked = request.headers.get("Access-Control-Request-Method")
    if request.method != "OPTIONS" or asked is None or TRUSTED_ORIGIN not in request:
        return None
    headers = {
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
        "Access-Control-Allow-Headers": request.headers.get("Access-Control-Request-Headers", "authorization"),
        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
    }
    if request.headers.get("Access-Control-Request-Private-Network") == "true":  # a public page calling here
        headers["Access-Control-Allow-Private-Network"] = "true"
    return web.Response(status=204, headers=headers)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer to a trusted origin (errors and streams included): let its page read it."""
    if "Origin" in request.headers:
        response.headers.add("Vary", "Origin")
    origin = request.get(TRUSTED_ORIGIN)
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = f"{MODE_HEADER}, {TOKENS_PER_STEP_HEADER}"


def _host_name(header: str) -> str:
    """The host of a ``Host`` header: lowercase, without port, brackets or final dot."""
    value = header.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_local_address(name: str, request: web.Request) -> bool:
    """``name`` is a loopback address, or the one this connection came in on (the bind address, or on
    all interfaces the address the client chose); a rebinding page sends its own name, never an address."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if not sockname:
        return False
    local = ipaddress.ip_address(sockname[0])
    if isinstance(local, ipaddress.IPv6Address) and local.ipv4_mapped is not None:
        local = local.ipv4_mapped
    return address == local
