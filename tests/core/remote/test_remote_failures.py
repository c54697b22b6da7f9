"""Remotes that misbehave, served by a small aiohttp server of the test's own on 127.0.0.1: malformed and
stalled streams, 429 with Retry-After, 403, 400, a stream without usage, an early close; a TLS mismatch
and a closed port. Each ends in one line that says what to do, never a traceback or a hang."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import keyring
import pytest
from aiohttp import web
from keyring.backends.fail import Keyring as NoStore

from core.chat.prompt import Message
from core.engine.answer_job import AnswerJob, AnswerOutcome, AnswerRequest
from core.engine.remote_answer import COUNTED_BY_CHUNKS, request_body
from core.progress import CancelToken
from core.remote import KeyStoreError, RemoteSource, RemoteTimeouts, resolve_key, store_key
from core.settings import LookaheadSettings, RemoteSettings, SamplingSettings, Settings
from tests.core.remote.test_remote_serve import Heard

SEEN = web.AppKey("seen", list)
FAST = RemoteTimeouts(connect=2.0, chunk=0.4)


def _chunk(text: str | None = None, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text} if text is not None else {}, "finish_reason": finish}
    return f"data: {json.dumps({'choices': [choice]})}\n\n".encode()


async def _stream(request: web.Request, parts: list[bytes | float]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
        else:
            await response.write(part)
    return response


def _app() -> web.Application:
    seen: list[dict] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        kind = request.match_info["kind"]
        if kind == "busy":
            return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "7"})
        if kind == "forbidden":
            return web.json_response({"error": {"message": "this key may not use m"}}, status=403)
        if kind == "refuses":
            return web.json_response({"error": {"message": "'seed' is not supported"}}, status=400)
        if kind == "malformed":
            return await _stream(request, [_chunk("Hel"), b"data: {not json\n\n"])
        if kind == "stalls":
            return await _stream(request, [_chunk("Hel"), 1.5, _chunk("lo", "stop")])
        if kind == "early":
            return await _stream(request, [_chunk("Hel"), _chunk("lo")])
        return await _stream(request, [_chunk("Hel"), _chunk("lo"), _chunk(" you", "stop"), b"data: [DONE]\n\n"])

    app = web.Application()
    app[SEEN] = seen
    app.router.add_post("/{kind}/v1/chat/completions", chat)
    return app


class OwnServer:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = _app()
        self.runner = web.AppRunner(self.app)
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result(10)
        self.port = site._server.sockets[0].getsockname()[1]

    def url(self, kind: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{kind}/v1"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def own() -> Iterator[OwnServer]:
    server = OwnServer()
    yield server
    server.close()


def answer(
    url: str, cancel: CancelToken | None = None, sampling: SamplingSettings | None = None
) -> tuple[Heard, float]:
    heard = Heard()
    request = AnswerRequest(
        (Message("user", "Hi"),),
        "auto",
        LookaheadSettings(),
        sampling or SamplingSettings(max_new_tokens=8),
        cancel=cancel or CancelToken(),
        remote=RemoteSource(url, "m", timeouts=FAST),
    )
    began = time.monotonic()
    AnswerJob(request, heard).steps_job().run(None)
    return heard, time.monotonic() - began


def one_line(outcome: AnswerOutcome | None) -> str:
    assert outcome is not None and outcome.error is not None
    assert "\n" not in outcome.error and "Traceback" not in outcome.error
    return outcome.error


def test_each_failure_of_a_remote_is_one_line_and_the_text_so_far_is_kept(own: OwnServer) -> None:
    heard, _ = answer(own.url("good"))
    assert heard.outcome.failure is None and heard.outcome.text == "Hello you"
    assert COUNTED_BY_CHUNKS in heard.outcome.figures.mode and heard.outcome.figures.new_tokens == 3

    cases = {
        "busy": "is busy or over its rate limit (429: slow down). Try again in 7 s.",
        "forbidden": "refused the request (403 forbidden: this key may not use m)",
        "refuses": "refused the request (400: 'seed' is not supported)",
        "malformed": "sent a malformed stream (a chunk that is not JSON",
        "stalls": "sent nothing for 0.4 s",
        "early": "closed the connection mid-answer",
    }
    for kind, said in cases.items():
        heard, seconds = answer(own.url(kind))
        assert said in one_line(heard.outcome), kind
        assert (
            heard.outcome.text
            == "".join(heard.deltas)
            == ("Hel" if kind in ("malformed", "stalls") else "Hello" if kind == "early" else "")
        )
        assert seconds < 3, kind  # never a hang

    heard, _ = answer(own.url("good", "https"))
    assert "The secure (TLS) connection" in one_line(heard.outcome)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    heard, _ = answer(f"http://127.0.0.1:{closed}/v1")
    assert "Cannot reach the remote server" in one_line(heard.outcome)


def test_stop_during_a_stalled_stream_ends_at_once_and_the_request_maps_the_settings(own: OwnServer) -> None:
    cancel = CancelToken()
    threading.Timer(0.2, cancel.cancel).start()
    heard, seconds = answer(own.url("stalls"), cancel)
    assert heard.outcome.finish_reason == "cancelled" and heard.outcome.text == "Hel" and seconds < 0.5

    sampling = SamplingSettings(temperature=0.7, top_p=0.9, max_new_tokens=5, seed=3, stop_strings=("###",))
    answer(own.url("good"), sampling=sampling)
    sent = own.app[SEEN][-1]
    assert {k: sent[k] for k in ("temperature", "top_p", "max_tokens", "seed", "stop", "stream")} == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 5,
        "seed": 3,
        "stop": ["###"],
        "stream": True,
    }
    assert sent["stream_options"] == {"include_usage": True} and "continue_final_message" not in sent
    assert request_body("m", [Message("user", "a"), Message("assistant", "b")], sampling)["continue_final_message"]


def test_without_a_credential_store_the_key_goes_through_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", NoStore())  # as on CI and headless Linux
    with pytest.raises(KeyStoreError, match="environment variable and name it in Settings, Model"):
        store_key("http://gpu:8000/v1", "sk-1")
    assert resolve_key("http://gpu:8000/v1") == ""
    monkeypatch.setenv("REMOTE29_VAR", "sk-2")
    assert resolve_key("http://gpu:8000/v1", "REMOTE29_VAR") == "sk-2"


def test_the_settings_name_the_remote_and_refuse_what_cannot_work() -> None:
    kept = Settings.from_json(
        {"remote": {"enabled": True, "url": " http://gpu-box:8000/ ", "model": "m", "key_env": "K"}}
    )
    assert kept.remote == RemoteSettings(True, "http://gpu-box:8000/v1", "m", "K")
    assert kept.remote.source().host == "gpu-box:8000" and "api_key" not in str(kept.to_json()["remote"])
    for bad, said in (
        ({"url": "gpu-box:8000"}, "is not a server address"),
        ({"enabled": True, "url": "http://gpu:1/v1"}, "No remote model is chosen"),
        ({"url": "http://gpu:1/v1", "key_env": "MY-KEY"}, "is not an environment variable name"),
    ):
        with pytest.raises(ValueError, match=said):
            Settings.from_json({"remote": bad})
