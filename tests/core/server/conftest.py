"""A real server over the tiny model: a model thread, an asyncio loop on its own thread, a real socket."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.engine.model_thread import ModelThread
from core.engine.ready import ReadyModel
from core.models import LoadOptions, ModelSource, load_model
from core.paths import AppPaths
from core.server.answer_events import AnswerDefaults
from core.server.config import ServerConfig
from core.server.service import LocalServer
from core.settings import LookaheadSettings, SamplingSettings
from tests.conftest import unmeasured

TINY_DEFAULTS = AnswerDefaults(
    "lookahead", LookaheadSettings(auto=False, window=4, ngram=3, guesses=4), SamplingSettings(max_new_tokens=24)
)


class Served:
    """A started :class:`LocalServer` on a loop thread; :meth:`close` stops it."""

    def __init__(self, runner: ModelThread, config: ServerConfig, defaults: AnswerDefaults) -> None:
        self.runner = runner
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="server-loop", daemon=True)
        self.thread.start()
        self.server = LocalServer(runner, lambda: defaults, config)
        self.call(self.server.start())

    def call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    @property
    def base_url(self) -> str:
        return self.server.url

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server_paths(tmp_path_factory: pytest.TempPathFactory, real_paths: AppPaths) -> AppPaths:
    tmp = tmp_path_factory.mktemp("server")
    return AppPaths(tmp / "config", tmp / "data", real_paths.cache_dir, tmp / "calibration").ensure()


@pytest.fixture(scope="module")
def server_ready(tiny_model_folder: Path, server_paths: AppPaths) -> ReadyModel:
    """The tiny model, Auto not measured (it decodes plain), shared by a module's tests."""
    loaded = load_model(
        ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu", dtype="fp32"), server_paths
    )
    return unmeasured(loaded)


@pytest.fixture(scope="module")
def tiny_runner(server_ready: ReadyModel, server_paths: AppPaths) -> Iterator[ModelThread]:
    """The tiny model on a model thread, shared by a module's tests."""
    runner = ModelThread(server_paths, ready=server_ready)
    yield runner
    assert runner.close()


@pytest.fixture
def serve(tiny_runner: ModelThread) -> Iterator[Callable[..., Served]]:
    """Start a server over the tiny runner on a free loopback port: ``serve(api_key=..., max_tokens=...)``."""
    started: list[Served] = []

    def serve_(defaults: AnswerDefaults = TINY_DEFAULTS, **config) -> Served:
        served = Served(tiny_runner, ServerConfig(port=0, **{"max_tokens": 256, **config}), defaults)
        started.append(served)
        return served

    yield serve_
    for served in started:
        served.close()
