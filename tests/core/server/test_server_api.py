"""The official openai client against the real server over the tiny model (real sockets, real model thread)."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from core.autotune.prepare import AutoTuning
from core.chat.answer import Answer
from core.chat.prompt import Message
from core.engine.plan import decoding_plan
from tests.core.server.conftest import TINY_DEFAULTS

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]


def client(served, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=options.pop("api_key", "none"), max_retries=0, **options)


def direct_answer(loaded, messages, max_new_tokens: int = 24) -> str:
    """The same request run straight through core.chat.answer (what the window runs)."""
    plan = decoding_plan(TINY_DEFAULTS.mode, TINY_DEFAULTS.lookahead, loaded, AutoTuning("Auto: plain"))
    sampling = TINY_DEFAULTS.sampling
    answer = Answer(
        loaded,
        [Message(m["role"], m["content"]) for m in messages] if isinstance(messages, list) else messages,
        lookahead=plan.lookahead,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
    )
    for _ in answer:
        pass
    return answer.text


def test_models_lists_the_loaded_model(serve, tiny_runner):
    models = client(serve()).models.list()
    assert [m.id for m in models.data] == [tiny_runner.model_name]


def test_chat_completion_equals_the_direct_answer_with_usage_and_lookahead_figures(serve, tiny_runner, server_ready):
    served = serve()
    raw = client(served).chat.completions.with_raw_response.create(
        model=tiny_runner.model_name, messages=MESSAGES, temperature=0
    )
    completion = raw.parse()
    text = completion.choices[0].message.content
    assert text == direct_answer(server_ready.loaded, MESSAGES)
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.completion_tokens > 0 and completion.usage.prompt_tokens > 0
    figures = completion.model_extra["lookahead"]
    assert figures["mode"] == "lookahead W4 N3 G4" and figures["tokens_per_step"] >= 1.0
    assert raw.headers["X-Lookahead-Mode"] == "lookahead W4 N3 G4"
    assert float(raw.headers["X-Lookahead-Tokens-Per-Step"]) == pytest.approx(figures["tokens_per_step"], abs=1e-3)


def test_streamed_chat_equals_the_whole_one_and_ends_with_usage(serve, tiny_runner):
    api = client(serve())
    whole = api.chat.completions.create(model=tiny_runner.model_name, messages=MESSAGES, temperature=0)
    chunks = list(
        api.chat.completions.create(
            model=tiny_runner.model_name,
            messages=MESSAGES,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    last_choice = [c for c in chunks if c.choices][-1]
    assert last_choice.choices[0].finish_reason == whole.choices[0].finish_reason
    assert last_choice.model_extra["lookahead"]["tokens_per_step"] >= 1.0
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_plain_and_lookahead_modes_give_the_same_greedy_text(serve, tiny_runner):
    api = client(serve())
    answers = {}
    for mode in ("plain", "lookahead"):
        completion = api.chat.completions.create(
            model=tiny_runner.model_name,
            messages=MESSAGES,
            temperature=0,
            max_tokens=40,
            extra_body={"lookahead_mode": mode},
        )
        answers[mode] = (completion.choices[0].message.content, completion.model_extra["lookahead"]["mode"])
    assert answers["plain"][0] == answers["lookahead"][0]
    assert answers["plain"][1] == "plain" and answers["lookahead"][1].startswith("lookahead")


def test_text_completion_streamed_and_not(serve, tiny_runner, server_ready):
    api = client(serve())
    prompt = "def add(a, b):\n"
    whole = api.completions.create(model=tiny_runner.model_name, prompt=prompt, max_tokens=12, temperature=0)
    assert whole.choices[0].text == direct_answer(server_ready.loaded, prompt, 12)
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 12
    streamed = "".join(
        c.choices[0].text
        for c in api.completions.create(
            model=tiny_runner.model_name, prompt=prompt, max_tokens=12, temperature=0, stream=True
        )
    )
    assert streamed == whole.choices[0].text


def test_seeded_sampling_repeats_and_stop_strings_cut(serve, tiny_runner):
    api = client(serve())
    runs = [
        api.chat.completions.create(
            model=tiny_runner.model_name, messages=MESSAGES, temperature=1.0, top_p=0.9, seed=7, max_tokens=16
        )
        .choices[0]
        .message.content
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    full = (
        api.chat.completions.create(model=tiny_runner.model_name, messages=MESSAGES, temperature=0)
        .choices[0]
        .message.content
    )
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    cut = api.chat.completions.create(model=tiny_runner.model_name, messages=MESSAGES, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_concurrent_clients_all_complete_with_their_own_answers(serve, tiny_runner, server_ready):
    served = serve()
    expected = {
        n: direct_answer(server_ready.loaded, [{"role": "user", "content": f"Count to {n}."}]) for n in range(6)
    }
    results: dict[int, str] = {}

    def ask(n: int) -> None:
        stream = client(served).chat.completions.create(
            model=tiny_runner.model_name,
            temperature=0,
            stream=True,
            messages=[{"role": "user", "content": f"Count to {n}."}],
        )
        results[n] = "".join(c.choices[0].delta.content or "" for c in stream)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == expected
    assert tiny_runner.pending == 0


def test_a_client_that_disconnects_mid_stream_cancels_its_answer_within_a_step(serve, tiny_runner, server_ready):
    served = serve(max_tokens=900)
    aborted = tiny_runner.endings["aborted"]
    stream = client(served).chat.completions.create(
        model=tiny_runner.model_name,
        messages=MESSAGES,
        temperature=0,
        max_tokens=900,
        stream=True,
        extra_body={"lookahead_mode": "plain"},
    )
    next(iter(stream))
    next(iter(stream))
    closed = time.monotonic()
    stream.close()
    while tiny_runner.endings["aborted"] == aborted and time.monotonic() - closed < 10:
        time.sleep(0.005)
    assert tiny_runner.endings["aborted"] == aborted + 1
    assert time.monotonic() - closed < 1.0
    deadline = time.monotonic() + 5
    while not any(r.status == 499 for r in served.server.activity.recent) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.status for r in served.server.activity.recent][-1] == 499
    again = client(served).chat.completions.create(model=tiny_runner.model_name, messages=MESSAGES, temperature=0)
    assert again.choices[0].message.content == direct_answer(server_ready.loaded, MESSAGES)
