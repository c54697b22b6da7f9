"""Who may drive the server: web pages (Origin), DNS rebinding (Host), bodies that are not JSON.

Real sockets against the real server over the tiny model; a counting runner in front of the real
model thread shows whether a refused request queued a job.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest

from core.engine.jobs import StepsJob
from core.engine.model_thread import ModelThread
from core.server.config import ServerConfig
from core.settings import ServerSettings, Settings, SettingsStore
from tests.core.server.conftest import TINY_DEFAULTS, Served
from tests.core.server.test_server_errors import assert_error, chat

CHAT = "/v1/chat/completions"
EVIL = "http://evil.example"
TRUSTED = "http://localhost:3000"


class CountingRunner:
    """The real model thread, counting the jobs the server queues on it."""

    def __init__(self, runner: ModelThread) -> None:
        self.runner, self.jobs = runner, 0

    @property
    def model_name(self) -> str | None:
        return self.runner.model_name

    def submit(self, job: StepsJob) -> None:
        self.jobs += 1
        self.runner.submit(job)


@pytest.fixture
def counted(tiny_runner):
    """``counted(**config)``: a server over a counting runner; returns (served, runner)."""
    started: list[Served] = []

    def counted_(**config) -> tuple[Served, CountingRunner]:
        runner = CountingRunner(tiny_runner)
        served = Served(runner, ServerConfig(port=0, max_tokens=8, **config), TINY_DEFAULTS)
        started.append(served)
        return served, runner

    yield counted_
    for served in started:
        served.close()


def send(
    served: Served, method: str, path: str, body: bytes | None, headers: dict[str, str], address: str | None = None
) -> tuple[int, dict, http.client.HTTPMessage]:
    """One raw request with exactly ``headers`` (Host included when given); status, JSON body, headers."""
    url = urlparse(served.base_url)
    connection = http.client.HTTPConnection(address or url.hostname, url.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        is_json = response.getheader("Content-Type", "").startswith("application/json")
        return response.status, json.loads(data) if is_json else {"text": data.decode()}, response.headers
    finally:
        connection.close()


def page_body(model: str) -> bytes:
    return json.dumps(chat(model, max_tokens=8)).encode()


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain", "Origin": EVIL},
        {"Content-Type": "application/x-www-form-urlencoded", "Origin": EVIL},
        {"Content-Type": "multipart/form-data; boundary=x", "Origin": EVIL},
        {"Content-Type": "application/json", "Origin": EVIL},
        {"Content-Type": "text/plain", "Origin": "null"},
        {"Content-Type": "application/json", "Host": "attacker.example:8765"},
        {"Content-Type": "text/plain", "Host": "attacker.example"},
        {"Content-Type": "application/json", "Host": "127.0.0.1.attacker.example"},
    ],
)
def test_a_page_like_request_gets_403_and_the_model_does_not_run(counted, tiny_runner, headers):
    served, runner = counted()
    status, body, _ = send(served, "POST", CHAT, page_body(tiny_runner.model_name), headers)
    assert_error(status, body, 403)
    assert runner.jobs == 0
    assert "Settings, Server" in body["error"]["message"]
    status, body, _ = send(
        served, "POST", CHAT, page_body(tiny_runner.model_name), {"Content-Type": "application/json"}
    )
    assert status == 200 and runner.jobs == 1, body  # the same body from a program on this computer runs


def test_a_foreign_host_cannot_read_the_models_either(counted):
    served, _ = counted()
    status, body, _ = send(served, "GET", "/v1/models", None, {"Host": "attacker.example:8765"})
    assert_error(status, body, 403)
    assert body["error"]["code"] == "host_not_allowed"
    port = served.server.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"127.0.0.2:{port}", "[::1]", "localhost."):
        status, body, _ = send(served, "GET", "/v1/models", None, {"Host": host})
        assert status == 200, (host, body)


def test_a_body_that_is_not_json_gets_415_and_the_model_does_not_run(counted, tiny_runner):
    served, runner = counted()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        status, body, _ = send(served, "POST", CHAT, page_body(tiny_runner.model_name), headers)
        assert_error(status, body, 415)
        assert "Content-Type: application/json" in body["error"]["message"]
    status, _, _ = send(
        served, "POST", CHAT, page_body(tiny_runner.model_name), {"Content-Type": "application/json; charset=utf-8"}
    )
    assert status == 200 and runner.jobs == 1


def test_a_trusted_web_app_gets_cors_headers_and_its_preflight(counted, tiny_runner):
    served, runner = counted(allowed_origins=(TRUSTED,), api_key="k")
    preflight = {
        "Origin": TRUSTED,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-lang",
        "Access-Control-Request-Private-Network": "true",
    }
    status, _, headers = send(served, "OPTIONS", CHAT, None, preflight)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == TRUSTED
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type, x-stainless-lang"
    assert headers["Access-Control-Allow-Private-Network"] == "true"
    assert "Origin" in headers["Vary"]
    status, body, headers = send(served, "OPTIONS", CHAT, None, {**preflight, "Origin": EVIL})
    assert_error(status, body, 403)
    assert "Access-Control-Allow-Origin" not in headers
    asked = {"Origin": TRUSTED, "Content-Type": "application/json", "Authorization": "Bearer k"}
    status, body, headers = send(served, "POST", CHAT, page_body(tiny_runner.model_name), asked)
    assert status == 200 and runner.jobs == 1, body
    assert headers["Access-Control-Allow-Origin"] == TRUSTED
    assert "X-Lookahead-Mode" in headers["Access-Control-Expose-Headers"]
    streamed = {**json.loads(page_body(tiny_runner.model_name)), "stream": True}
    status, _, headers = send(served, "POST", CHAT, json.dumps(streamed).encode(), asked)
    assert status == 200 and headers["Access-Control-Allow-Origin"] == TRUSTED
    status, body, headers = send(
        served, "POST", CHAT, page_body(tiny_runner.model_name), {**asked, "Authorization": ""}
    )
    assert_error(status, body, 401)  # the web app can read its error
    assert headers["Access-Control-Allow-Origin"] == TRUSTED


def test_allowed_host_names_are_accepted(counted):
    served, _ = counted(allowed_hosts=("mybox.lan",))
    assert send(served, "GET", "/v1/models", None, {"Host": f"MyBox.lan:{served.server.port}"})[0] == 200
    assert_error(*send(served, "GET", "/v1/models", None, {"Host": "otherbox.lan"})[:2], 403)


def this_machines_address() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


def test_on_the_network_the_address_a_client_connects_through_is_accepted(counted):
    address = this_machines_address()
    if address is None:
        pytest.skip("this machine has no network address besides loopback")
    served, _ = counted(host="0.0.0.0")
    port = served.server.port
    assert send(served, "GET", "/v1/models", None, {"Host": f"{address}:{port}"}, address)[0] == 200
    assert send(served, "GET", "/v1/models", None, {"Host": f"127.0.0.1:{port}"}, "127.0.0.1")[0] == 200
    status, body, _ = send(served, "GET", "/v1/models", None, {"Host": f"{address}:{port}"}, "127.0.0.1")
    assert_error(status, body, 403)  # the Host names an address this connection did not come through
    assert_error(*send(served, "GET", "/v1/models", None, {"Host": "203.0.113.9"}, address)[:2], 403)


def test_allowed_hosts_and_origins_are_settings(tmp_path: Path):
    server = ServerSettings(allowed_hosts=("MyBox.LAN.", "192.168.1.20"), allowed_origins=("http://LocalHost:3000/",))
    assert server.allowed_hosts == ("mybox.lan", "192.168.1.20")
    assert server.allowed_origins == ("http://localhost:3000",)
    store = SettingsStore(tmp_path)
    store.save(Settings(server=server))
    assert store.load().settings.server == server
    config = ServerConfig.from_settings(server)
    assert config.allowed_hosts == server.allowed_hosts and config.allowed_origins == server.allowed_origins
    for bad in (
        {"allowed_hosts": ("http://mybox",)},
        {"allowed_hosts": ("mybox:8765",)},
        {"allowed_hosts": ("my box",)},
        {"allowed_hosts": ("",)},
        {"allowed_hosts": "mybox"},
        {"allowed_origins": ("localhost:3000",)},
        {"allowed_origins": ("http://localhost:3000/app",)},
        {"allowed_origins": ("*",)},
        {"allowed_origins": (5,)},
    ):
        with pytest.raises(ValueError, match="allowed_"):
            ServerSettings(**bad)
