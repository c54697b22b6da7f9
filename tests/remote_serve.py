"""``lookahead-chat serve`` in a sub-process, as the remote engine of the remote-source tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "sk-remote-29-do-not-leak"


@dataclass
class Serve:
    """A running ``lookahead-chat serve``: its process, base URL, and the model it serves."""

    proc: subprocess.Popen
    url: str
    model: str = "tiny"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


def start_serve(model_folder: Path, home: Path, api_key: str = API_KEY) -> Serve:
    """``serve`` on the tiny model on a free port, plain decoding, requiring ``api_key``."""
    # The session's thread count: the tiny model's step packages, compiled by the session for it, then load.
    threads = str(torch.get_num_threads())
    env = {
        **os.environ,
        "LOOKAHEAD_CHAT_HOME": str(home),
        "LOOKAHEAD_CHAT_API_KEY": api_key,
        "OMP_NUM_THREADS": threads,
        "LOOKAHEAD_CHAT_CACHE": str(home / "cache"),  # its calibration stays its own: in-process commands measure anew
    }
    args = [
        "serve",
        "--model",
        str(model_folder),
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--port",
        "0",
        "--mode",
        "plain",
    ]
    start = f"import runpy, sys; sys.argv = ['app', *{args!r}]; runpy.run_module('app', run_name='__main__')"
    proc = subprocess.Popen(
        [sys.executable, "-c", start], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    line = proc.stdout.readline()
    match = re.search(r"Serving (\S+) on (http://127\.0\.0\.1:\d+/v1)", line)
    if not match:
        proc.kill()
        raise AssertionError(line + proc.communicate(timeout=30)[1][-3000:])
    return Serve(proc, match.group(2), match.group(1))
