"""Every bad request gets an OpenAI-style error object with a 4xx code; none stops the server or the model thread."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from urllib.parse import urlparse

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHAT = "/v1/chat/completions"


def post(served, path: str, body: bytes | str | dict, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    """One raw HTTP request; the status and the JSON body."""
    url = urlparse(served.base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    try:
        connection.request(
            "POST" if body is not None else "GET",
            path,
            body=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        response = connection.getresponse()
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            return response.status, {"events": response.read().decode()}
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def chat(model: str, **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], **fields}


def assert_error(status: int, body: dict, expected: int) -> None:
    assert status == expected, body
    assert set(body["error"]) >= {"message", "type", "param", "code"} and body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ("{not json", 400, None),
        ("[1, 2]", 400, None),
        ('"text"', 400, None),
        ('{"a": NaN}', 400, None),
        ("[" * 100_000, 400, None),
        (b"\xff\xfe", 400, None),
        ({"messages": [{"role": "user", "content": "Hi"}]}, 400, "model"),
        ({"model": "MODEL"}, 400, "messages"),
        ({"model": "MODEL", "messages": []}, 400, "messages"),
        ({"model": "MODEL", "messages": ["hi"]}, 400, "messages[0]"),
        ({"model": "MODEL", "messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role"),
        ({"model": "MODEL", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        (
            {"model": "MODEL", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            400,
            "messages[0].content",
        ),
        (chat("MODEL", temperature=-1), 400, "temperature"),
        (chat("MODEL", temperature="hot"), 400, "temperature"),
        (chat("MODEL", temperature=True), 400, "temperature"),
        (chat("MODEL", top_p=0), 400, "top_p"),
        (chat("MODEL", max_tokens=0), 400, "max_tokens"),
        (chat("MODEL", max_tokens=100_000), 400, "max_tokens"),
        (chat("MODEL", max_tokens=2.5), 400, "max_tokens"),
        (chat("MODEL", stop=["a", "b", "c", "d", "e"]), 400, "stop"),
        (chat("MODEL", stop=5), 400, "stop"),
        (chat("MODEL", seed=-3), 400, "seed"),
        (chat("MODEL", n=2), 400, "n"),
        (chat("MODEL", stream="yes"), 400, "stream"),
        (chat("MODEL", stream=True, stream_options={"include_usage": 1}), 400, "stream_options"),
        (chat("MODEL", tools=[{"type": "function"}]), 400, "tools"),
        (chat("MODEL", logprobs=True), 400, "logprobs"),
        (chat("MODEL", presence_penalty=1.0), 400, "presence_penalty"),
        (chat("MODEL", lookahead_mode="fast"), 400, "lookahead_mode"),
        (chat("no-such-model"), 404, "model"),
        ('{"model": "MODEL", "messages": [{"role": "user", "content": "\\ud800"}]}', 400, "messages[0].content"),
        ('{"model": "MODEL", "messages": [{"role": "user", "content": "a\\udfffb"}]}', 400, "messages[0].content"),
        (
            '{"model": "MODEL", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud83d"}]}]}',
            400,
            "messages[0].content[0].text",
        ),
        (chat("MODEL", stop=["ok", "\ud800"]), 400, "stop[1]"),
        (chat("MODEL", user="\udc00"), 400, "user"),
    ],
)
def test_each_bad_chat_request_gets_its_error_object(serve, tiny_runner, body, status, param):
    served = serve()
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.replace("MODEL", tiny_runner.model_name)
    got, answer = post(served, CHAT, body)
    assert_error(got, answer, status)
    assert answer["error"]["param"] == param


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "\ud800"}, "prompt"),
        ({"prompt": ["\udbff"]}, "prompt[0]"),
    ],
)
def test_bad_text_completion_requests(serve, tiny_runner, body, param):
    got, answer = post(serve(), "/v1/completions", {"model": tiny_runner.model_name, **body})
    assert_error(got, answer, 400)
    assert answer["error"]["param"] == param


def test_over_long_prompts_and_bodies_are_refused(serve, tiny_runner):
    served = serve(max_body_bytes=200_000)
    long_text = "word " * 5000  # more tokens than the tiny model's 1024-token context
    got, answer = post(
        served, CHAT, {"model": tiny_runner.model_name, "messages": [{"role": "user", "content": long_text}]}
    )
    assert_error(got, answer, 400)
    assert answer["error"]["code"] == "context_length_exceeded"
    got, answer = post(
        served, "/v1/completions", {"model": tiny_runner.model_name, "prompt": long_text, "stream": True}
    )
    assert_error(got, answer, 400)
    got, answer = post(
        served, CHAT, {"model": tiny_runner.model_name, "messages": [{"role": "user", "content": "x" * 300_000}]}
    )
    assert_error(got, answer, 413)
    with pytest.raises(openai.BadRequestError) as raised:
        openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0).chat.completions.create(
            model=tiny_runner.model_name, messages=[{"role": "user", "content": long_text}]
        )
    assert raised.value.code == "context_length_exceeded"


def test_unknown_paths_and_methods(serve):
    served = serve()
    assert_error(*post(served, "/v1/embeddings", {}), 404)
    assert_error(*post(served, "/v1/models/nothing", None), 404)
    assert_error(*post(served, "/v1/models", {}), 405)


def test_the_api_key_is_required_when_set(serve, tiny_runner):
    served = serve(api_key="s3cret")
    assert_error(*post(served, "/v1/models", None), 401)
    assert_error(*post(served, CHAT, chat(tiny_runner.model_name), {"Authorization": "Bearer wrong"}), 401)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served.base_url, api_key="wrong", max_retries=0).models.list()
    api = openai.OpenAI(base_url=served.base_url, api_key="s3cret", max_retries=0)
    assert (
        api.chat.completions.create(
            model=tiny_runner.model_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        ).usage.completion_tokens
        == 4
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "n",
    "lookahead_mode",
    "logprobs",
    "tools",
    "presence_penalty",
    "response_format",
]


GOOD = {
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "max_tokens": st.integers(1, 8),
    "max_completion_tokens": st.integers(1, 8),
    "stop": st.lists(st.text(min_size=1, max_size=3), max_size=4),
    "seed": st.integers(0, 1000),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "n": st.just(1),
    "lookahead_mode": st.sampled_from(["auto", "plain", "lookahead"]),
    "presence_penalty": st.just(0),
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=30)}
        ),
        min_size=1,
        max_size=3,
    ),
    "prompt": st.text(min_size=1, max_size=30),
}


@st.composite
def bodies(draw, model: str):
    """Mostly valid requests with a few fields broken, dropped or added; sometimes not JSON at all."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "prompt": "Once"}
    for key in draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=6)):
        body[key] = draw(GOOD[key] | JSON) if key in GOOD and draw(st.booleans()) else draw(JSON)
    for key in draw(st.lists(st.sampled_from(sorted(body)), unique=True, max_size=2)):
        del body[key]
    kind = draw(st.sampled_from(["json"] * 6 + ["raw", "bytes"]))
    if kind == "raw":
        return json.dumps(body)[: draw(st.integers(0, 200))]
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    return body


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_no_request_body_stops_the_server_or_the_model_thread(serve_once, tiny_runner, data):
    served = serve_once
    path = data.draw(st.sampled_from([CHAT, "/v1/completions"]))
    status, answer = post(served, path, data.draw(bodies(tiny_runner.model_name)))
    assert status < 500, answer
    STATUSES[status] += 1
    if status != 200:
        assert answer["error"]["message"]
    elif "events" in answer:
        assert answer["events"].endswith("data: [DONE]\n\n")


STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module")
def serve_once(tiny_runner):
    from core.server.config import ServerConfig
    from tests.core.server.conftest import TINY_DEFAULTS, Served

    served = Served(tiny_runner, ServerConfig(port=0, max_tokens=8), TINY_DEFAULTS)
    yield served
    api = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
    after = api.chat.completions.create(model=tiny_runner.model_name, messages=[{"role": "user", "content": "Hi"}])
    assert after.usage.completion_tokens > 0
    served.close()
    assert tiny_runner.pending == 0
    assert STATUSES[200] and STATUSES[400], STATUSES  # the bodies reached both the model and the checks


def test_a_port_in_use_is_a_clear_start_failure(serve, tiny_runner):
    from core.server.config import ServerConfig
    from core.server.service import LocalServer, ServerStartError
    from tests.core.server.conftest import TINY_DEFAULTS

    served = serve()
    second = LocalServer(tiny_runner, lambda: TINY_DEFAULTS, ServerConfig(port=served.server.port))
    with pytest.raises(ServerStartError, match="choose another port"):
        served.call(second.start())
    assert second.activity.state.startswith(f"failed: could not listen on 127.0.0.1:{served.server.port}")
    assert openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0).models.list().data
