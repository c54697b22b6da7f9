"""``lookahead-chat serve``: the OpenAI-compatible API without the window, until Ctrl+C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from app.cli.collector import collecting_after
from app.cli.loading import command_settings, load_named_model
from app.cli.output import end_progress_line, one_line_errors, progress_printer
from core.engine.model_thread import ModelThread, NoEvents
from core.engine.ready import ModelInfo, make_ready
from core.paths import AppPaths
from core.server.answer_events import AnswerDefaults
from core.server.config import ServerConfig
from core.server.service import LocalServer, ServerStartError

API_KEY_VARIABLE = "LOOKAHEAD_CHAT_API_KEY"  # serve's API key, kept out of the process list


@one_line_errors
def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """One model, one model thread, requests in order."""
    settings = command_settings(paths)
    wanted = {
        "port": args.port,
        "api_key": os.environ.get(API_KEY_VARIABLE) if args.api_key is None else args.api_key,
        "max_tokens": args.max_tokens,
    }
    allow_network = args.allow_network or settings.server.allow_network
    config = replace(
        ServerConfig.from_settings(replace(settings.server, allow_network=allow_network)),
        **{k: v for k, v in wanted.items() if v is not None},
    )
    try:
        held = _hold_port(config.host, config.port)
    except OSError as err:
        print(
            f"error: the server could not listen on {config.host}:{config.port} ({err.strerror or err}); "
            "choose another port with --port, or in Settings, Server.",
            file=sys.stderr,
        )
        return 1
    with held:  # let go just before the server binds it (a lost race still ends in ServerStartError's message)
        loaded = load_named_model(args, settings, paths)
        with collecting_after():  # the prepared step stays until the server stops
            ready = make_ready(loaded, paths.ensure(), progress=progress_printer(), background=True)
        end_progress_line()
    print(ready.auto.reason, file=sys.stderr)
    if config.host != "127.0.0.1" and not config.api_key:
        print("warning: other computers may connect and no API key is set (--api-key)", file=sys.stderr)
    defaults = AnswerDefaults.from_settings(replace(settings, mode=args.mode) if args.mode else settings)
    runner = ModelThread(paths, _Upgrades(), ready)  # a first start measures in the background, between requests
    server = LocalServer(runner, lambda: defaults, config)

    async def serve() -> None:
        await server.start()
        stopped = asyncio.Event()
        try:  # a service manager's stop (systemd, docker stop) ends it as Ctrl+C does
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        except (NotImplementedError, AttributeError):  # Windows: no SIGTERM to handle there
            pass
        print(f"Serving {loaded.name} on {server.url} (Ctrl+C stops)", flush=True)
        try:
            await stopped.wait()
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
        print("stopped.", file=sys.stderr)
    except ServerStartError as err:
        print(f"error: the server {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped.", file=sys.stderr)
    finally:
        runner.close()
    return 0


class _Upgrades(NoEvents):
    """Says on stderr when the background work made the model faster (a first start on this machine)."""

    def model_upgraded(self, info: ModelInfo, message: str) -> None:
        print(message or info.auto_reason, file=sys.stderr, flush=True)


def _hold_port(host: str, port: int) -> AbstractContextManager[object]:
    """A socket bound to ``host:port`` (raises OSError when that is taken), so a busy port is said before the
    model loads; port 0 (any free one) holds nothing. Not listening, it turns connections away meanwhile."""
    if port == 0:
        return nullcontext()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if os.name == "posix":  # as asyncio's server binds: a port left in TIME_WAIT counts as free
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
