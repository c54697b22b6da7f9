"""A remote engine's failures as one line each: what happened, and what to do."""

from __future__ import annotations

import asyncio
import json
import ssl

import aiohttp

MAX_DETAIL = 160  # a server's own words quoted in a message, at most


class RemoteError(ValueError):
    """A remote request failed; ``str(err)`` is the whole message. A ValueError: the job runner shows it as
    said (no traceback in the log: a refused request is not a bug of ours)."""


def server_detail(body: str) -> str:
    """The server's own reason from an error body (OpenAI's ``error.message``, FastAPI's ``detail``, or the text)."""
    text = body.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict):
            error = error.get("message", error)
        text = error if isinstance(error, str) else json.dumps(error) if error is not None else text
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def for_status(status: int, detail: str, host: str, model: str = "", retry_after: str | None = None) -> RemoteError:
    """The message for an HTTP error status from ``host``; ``detail`` is the server's own reason."""
    said = f": {detail}" if detail else ""
    if status == 401:
        return RemoteError(
            f"The remote server {host} refused the API key (401{said}). Set its key in Settings, Model "
            "(or the environment variable named there, or by --api-key-env)."
        )
    if status == 403:
        return RemoteError(
            f"The remote server {host} refused the request (403 forbidden{said}). Check that the API key may use "
            "this model, and that the server lets this computer in."
        )
    if status == 404:
        return RemoteError(
            f"The remote server {host} has no model {model!r} or no OpenAI API at this URL (404{said}). Pick one "
            "of its models in Settings, Model (`lookahead-chat models --remote URL` lists them); the URL ends in /v1."
        )
    if status == 429:
        wait = f"in {retry_after.strip()} s" if retry_after and retry_after.strip().isdigit() else "in a while"
        return RemoteError(f"The remote server {host} is busy or over its rate limit (429{said}). Try again {wait}.")
    if 400 <= status < 500:
        return RemoteError(
            f"The remote server {host} refused the request ({status}{said}). Change what it names "
            "(Settings, Generation), or the model."
        )
    return RemoteError(f"The remote server {host} failed ({status}{said}). Try again; if it persists, see its log.")


def for_exception(err: BaseException, host: str, timeouts_chunk: float, timeouts_connect: float) -> RemoteError:
    """The message for a failure of the connection to ``host`` (aiohttp's and the socket's own errors)."""
    if isinstance(err, RemoteError):
        return err
    reason = " ".join(str(err).split()) or type(err).__name__
    if len(reason) > MAX_DETAIL:
        reason = reason[: MAX_DETAIL - 1] + "…"
    if isinstance(err, (aiohttp.ClientSSLError, ssl.SSLError)) or isinstance(
        getattr(err, "os_error", None), ssl.SSLError
    ):
        return RemoteError(
            f"The secure (TLS) connection to {host} failed ({reason}). Check that the URL's https:// or http:// "
            "matches the server, and that its certificate is valid."
        )
    if isinstance(err, aiohttp.ConnectionTimeoutError):
        return RemoteError(
            f"The remote server {host} did not accept a connection within {timeouts_connect:g} s. Check the URL, "
            "the network, and that the server is running."
        )
    if isinstance(err, (aiohttp.SocketTimeoutError, asyncio.TimeoutError, TimeoutError)):
        return RemoteError(
            f"The remote server {host} sent nothing for {timeouts_chunk:g} s and was left. It may be overloaded; "
            "try again, or a smaller answer length."
        )
    if isinstance(err, aiohttp.ClientConnectorError):
        return RemoteError(
            f"Cannot reach the remote server {host} ({reason}). Check the URL and that the server is running."
        )
    if isinstance(err, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionError)):
        return RemoteError(
            f"The remote server {host} closed the connection mid-answer. Check that it still runs, then press Continue."
        )
    if isinstance(err, aiohttp.ClientError):
        return RemoteError(f"The request to the remote server {host} failed ({reason}). Check the URL and try again.")
    raise err  # not a connection failure: a bug, for the job runner's unexpected-error path


def malformed(host: str, what: str) -> RemoteError:
    return RemoteError(
        f"The remote server {host} sent a malformed stream ({what}). It may not speak the OpenAI API: check the URL."
    )


def ended_early(host: str) -> RemoteError:
    return RemoteError(
        f"The remote server {host} closed the connection mid-answer. Check that it still runs, then press Continue."
    )
