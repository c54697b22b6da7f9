"""A remote engine that is a real ``lookahead-chat serve`` in a sub-process: streaming, the model list,
Stop, a wrong key, an unknown model, the command line, and a server killed mid-answer."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from app.cli.main import main
from core.chat.prompt import Message
from core.compare.remote_run import LOCAL, REMOTE, LocalRemoteRun, local_remote_summary
from core.compare.run import RunDone
from core.engine.answer_job import AnswerFigures, AnswerOutcome, AnswerRequest, AnswerStart
from core.engine.remote_answer import COUNTED_BY_CHUNKS
from core.engine.remote_thread import RemoteThread
from core.progress import CancelToken
from core.remote import RemoteSource, RemoteTarget, list_models
from core.settings import LookaheadSettings, RemoteSettings, SamplingSettings, Settings
from tests.remote_serve import API_KEY, Serve, start_serve

KEY_VARIABLE = "REMOTE29_TEST_KEY"


class Heard:
    """An answer's reports, with events a test can wait on."""

    def __init__(self, after_deltas: int = 0, then=None) -> None:
        self.deltas: list[str] = []
        self.outcome: AnswerOutcome | None = None
        self.first = threading.Event()
        self.done = threading.Event()
        self._after, self._then = after_deltas, then

    def started(self, start: AnswerStart) -> None:
        assert start.mode.startswith("remote ")

    def delta(self, text: str, figures: AnswerFigures) -> None:
        self.deltas.append(text)
        self.first.set()
        if self._then is not None and len(self.deltas) == self._after:
            self._then()

    def ended(self, outcome: AnswerOutcome) -> None:
        self.outcome = outcome
        self.done.set()


def ask(runner: RemoteThread, source: RemoteSource, max_new: int = 16, cancel: CancelToken | None = None, **heard):
    listener = Heard(**heard)
    request = AnswerRequest(
        (Message("user", "Hello there"),),
        "auto",
        LookaheadSettings(),
        SamplingSettings(max_new_tokens=max_new),
        cancel=cancel or CancelToken(),
        remote=source,
    )
    runner.answer(request, listener)
    return listener, request.cancel


@pytest.fixture(scope="module")
def runner():
    thread = RemoteThread()
    yield thread
    assert thread.shutdown()


def test_serve_as_the_remote_streams_lists_stops_and_refuses(
    remote_serve: Serve, runner: RemoteThread, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, API_KEY)
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path))
    source = RemoteSource(remote_serve.url, remote_serve.model, KEY_VARIABLE)
    assert asyncio.run(list_models(RemoteTarget(source.url, API_KEY))) == [remote_serve.model]

    heard, _ = ask(runner, source)
    assert heard.done.wait(60)
    outcome = heard.outcome
    assert outcome.failure is None and outcome.finish_reason in ("length", "eos")
    assert outcome.text == "".join(heard.deltas) and outcome.text
    assert outcome.figures.new_tokens == 16 or outcome.finish_reason == "eos"  # the server's usage
    assert COUNTED_BY_CHUNKS not in outcome.figures.mode and "(plain)" in outcome.figures.mode
    assert outcome.device_label == f"remote {source.host}" and outcome.figures.tokens_per_second > 0

    # Stop: the request closes within 0.5 s and every character received is kept
    stopped_at: list[float] = []
    cancel = CancelToken()
    heard, _ = ask(
        runner,
        source,
        900,
        cancel,
        after_deltas=2,
        then=lambda: (stopped_at.append(time.monotonic()), cancel.cancel()),
    )
    assert heard.done.wait(60)
    assert time.monotonic() - stopped_at[0] < 0.5
    assert heard.outcome.finish_reason == "cancelled" and heard.outcome.text == "".join(heard.deltas)

    monkeypatch.setenv(KEY_VARIABLE, "wrong-key")
    heard, _ = ask(runner, source)
    assert heard.done.wait(30)
    assert "refused the API key (401" in heard.outcome.error and "\n" not in heard.outcome.error
    monkeypatch.setenv(KEY_VARIABLE, API_KEY)
    heard, _ = ask(runner, RemoteSource(remote_serve.url, "no-such-model", KEY_VARIABLE))
    assert heard.done.wait(30)
    assert "has no model 'no-such-model'" in heard.outcome.error and "(404" in heard.outcome.error

    # the command line: models --remote and ask --remote, and a one-line error
    capsys.readouterr()
    assert main(["models", "--remote", remote_serve.url, "--api-key-env", KEY_VARIABLE]) == 0
    assert capsys.readouterr().out.split() == [remote_serve.model]
    args = ["ask", "Hi", "--remote", remote_serve.url, "--model", remote_serve.model, "--max-new-tokens", "6"]
    assert main([*args, "--api-key-env", KEY_VARIABLE, "--stats"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "tok/s (remote tiny" in err or remote_serve.model in err
    assert main([*args, "--api-key-env", "REMOTE29_UNSET"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: The environment variable REMOTE29_UNSET") and len(err) == 1
    assert API_KEY not in out + "".join(err)


def test_a_remote_killed_mid_answer_keeps_every_character(
    tiny_model_folder: Path, remote_home: Path, runner: RemoteThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = start_serve(tiny_model_folder, remote_home)
    try:
        monkeypatch.setenv(KEY_VARIABLE, API_KEY)
        source = RemoteSource(served.url, served.model, KEY_VARIABLE)
        heard, _ = ask(runner, source, 900, after_deltas=3, then=served.proc.kill)
        assert heard.done.wait(60)
    finally:
        served.stop()
    outcome = heard.outcome
    assert outcome.finish_reason == "error" and len(heard.deltas) >= 3
    assert outcome.text == "".join(heard.deltas)
    assert "closed the connection mid-answer" in outcome.error and outcome.error.endswith("The text so far is kept.")


def test_compare_runs_the_local_model_against_the_remote_and_gives_both_rates(
    remote_serve: Serve, tiny_ready, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, API_KEY)
    settings = Settings(mode="plain", remote=RemoteSettings(True, remote_serve.url, remote_serve.model, KEY_VARIABLE))
    run = LocalRemoteRun(tiny_ready, settings.remote.source(), settings, "Hello there", 8, CancelToken())
    done = [event.record for event in run if isinstance(event, RunDone)]
    assert [record.mode for record in done] == [LOCAL, REMOTE] and run.result().runs == done
    assert all(record.text and record.stats.new_tokens == 8 for record in done)  # the remote side: the server's usage
    line = local_remote_summary(run.result())
    assert line.startswith("local ") and " tok/s · remote " in line and "x the local rate." in line
