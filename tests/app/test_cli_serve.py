"""``lookahead-chat serve``: the real command in a sub-process, driven by the official openai client."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]


def test_serve_streams_to_the_openai_client_and_stops_on_ctrl_c(tiny_model_folder: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(tmp_path), "LOOKAHEAD_CHAT_API_KEY": "k3y"}
    args = [
        "serve",
        "--model",
        str(tiny_model_folder),
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--port",
        "0",
        "--mode",
        "lookahead",
    ]
    # As in a terminal: Ctrl+C reaches the server even when this test runs in a background job, whose
    # children inherit SIGINT ignored (then asyncio installs no handler and the signal is lost).
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.argv = ['app', *{args!r}]; runpy.run_module('app', run_name='__main__')"
    )
    command = [sys.executable, "-c", start]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line + proc.stderr.read() if proc.poll() is not None else line
        api = openai.OpenAI(base_url=match.group(1), api_key="k3y", max_retries=0)
        model = api.models.list().data[0].id
        chunks = list(
            api.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=10, temperature=0, stream=True
            )
        )
        assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 1
        assert chunks[-1].model_extra["lookahead"]["mode"].startswith("lookahead W")
        try:
            openai.OpenAI(base_url=match.group(1), api_key="wrong", max_retries=0).models.list()
            raise AssertionError("a wrong API key was accepted")
        except openai.AuthenticationError:
            pass
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert "stopped." in err and "Traceback" not in err


def test_serve_on_a_chosen_port_stops_cleanly_on_sigterm(tiny_model_folder: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LOOKAHEAD_CHAT_HOME": str(tmp_path)}
    with socket.socket() as probe:  # a free port: serve holds it while the model loads, then the server takes it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [
        "serve",
        "--model",
        str(tiny_model_folder),
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--port",
        str(port),
        "--mode",
        "plain",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()
        assert f"on http://127.0.0.1:{port}/v1" in line, line + (proc.stderr.read() if proc.poll() is not None else "")
    finally:
        proc.send_signal(signal.SIGTERM)  # what systemd or `docker stop` sends
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[
        -3000:
    ]  # not killed by the signal (-15): the server stopped and closed its model thread
    assert "stopped." in err and "Traceback" not in err
