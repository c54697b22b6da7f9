"""The HTTP client of a remote OpenAI-compatible engine (aiohttp): ``/v1/models`` and streamed ``/v1/chat/completions``.

Every failure is a :class:`~core.remote.errors.RemoteError` with a one-line message; no wait is unbounded
(a connect timeout, and one between chunks).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from core.remote.errors import ended_early, for_exception, for_status, malformed, server_detail
from core.remote.target import RemoteTarget

MAX_LINE = 1 << 20  # one SSE line; a longer one is a malformed stream


@dataclass(frozen=True)
class StreamEvent:
    """One chunk of a streamed answer: its text, and what the last chunks carry (finish reason, usage,
    and the ``lookahead`` figures a Lookahead Chat server adds)."""

    text: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    lookahead: dict[str, Any] | None = None


@asynccontextmanager
async def _session(target: RemoteTarget) -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=None, connect=target.timeouts.connect, sock_read=target.timeouts.chunk)
    async with aiohttp.ClientSession(timeout=timeout, headers=target.headers()) as session:
        try:
            yield session
        except Exception as err:
            raise for_exception(err, target.host, target.timeouts.chunk, target.timeouts.connect) from None


async def _check(response: aiohttp.ClientResponse, target: RemoteTarget, model: str = "") -> None:
    if response.status < 400:
        return
    body = target.scrub((await response.content.read(64 * 1024)).decode("utf-8", "replace"))
    raise for_status(response.status, server_detail(body), target.host, model, response.headers.get("Retry-After"))


async def list_models(target: RemoteTarget) -> list[str]:
    """The ids of the models the server serves (``GET /models``), in its order."""
    async with _session(target) as session, session.get(f"{target.url}/models") as response:
        await _check(response, target)
        try:
            data = await response.json(content_type=None)
            models = [str(item["id"]) for item in data["data"]]
        except (ValueError, TypeError, KeyError, aiohttp.ContentTypeError):
            raise malformed(target.host, "its model list is not OpenAI's {data: [{id}]}") from None
    return models


async def stream_chat(target: RemoteTarget, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
    """Stream one chat completion (``body`` without ``stream``); ends after the server's last chunk.

    A stream that stops before a chunk with a finish reason (or ``[DONE]``) is a connection lost
    mid-answer; the events already yielded are the text received.
    """
    request = {**body, "stream": True, "stream_options": {"include_usage": True}}
    model = str(body.get("model", ""))
    async with _session(target) as session, session.post(f"{target.url}/chat/completions", json=request) as response:
        await _check(response, target, model)
        finished = False
        async for data in _sse_data(response, target):
            if data == "[DONE]":
                return
            event = _event(data, target)
            finished = finished or event.finish_reason is not None
            yield event
        if not finished:
            raise ended_early(target.host)


async def _sse_data(response: aiohttp.ClientResponse, target: RemoteTarget) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (its ``data:`` lines joined), comments and other fields skipped."""
    lines: list[str] = []
    while True:
        try:
            raw = await response.content.readuntil(b"\n", max_size=MAX_LINE)
        except LineTooLong:  # not a stream of events
            raise malformed(target.host, "a line over 1 MiB") from None
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("data:"):
            lines.append(line[5:].removeprefix(" "))
        elif not line and lines:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


def _event(data: str, target: RemoteTarget) -> StreamEvent:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise malformed(target.host, f"a chunk that is not JSON: {data[:40]!r}") from None
    if not isinstance(chunk, dict):
        raise malformed(target.host, "a chunk that is not a JSON object")
    if "error" in chunk:
        detail = server_detail(target.scrub(json.dumps(chunk)))
        raise for_status(500, f"mid-answer: {detail}", target.host)
    choices = chunk.get("choices") or []
    usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else None
    lookahead = chunk.get("lookahead") if isinstance(chunk.get("lookahead"), dict) else None
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise malformed(target.host, "'choices' is not a list of objects")
    if not choices:
        return StreamEvent(usage=usage, lookahead=lookahead)
    delta = choices[0].get("delta") or {}
    text = delta.get("content") if isinstance(delta, dict) else None
    reason = choices[0].get("finish_reason")
    if (
        not isinstance(delta, dict)
        or not isinstance(text, (str, type(None)))
        or not isinstance(reason, (str, type(None)))
    ):
        raise malformed(target.host, "a choice without a text delta")
    return StreamEvent(text or "", reason, usage, lookahead)
