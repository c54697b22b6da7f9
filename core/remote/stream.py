"""A remote answer's stream as a plain iterator, for the job runner's thread: its own event loop, and Stop
heard within :data:`POLL_S` even while the server sends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from core.progress import CancelToken
from core.remote.client import StreamEvent, stream_chat
from core.remote.target import RemoteTarget

POLL_S = 0.05
"""How often a wait for the next chunk looks at the cancel token."""


class RemoteStream:
    """Iterate for the :class:`StreamEvent` of one streamed chat completion; setting ``cancel`` (or
    closing the iterator) closes the request, which tells the server to stop."""

    def __init__(self, target: RemoteTarget, body: dict[str, Any], cancel: CancelToken) -> None:
        self.target, self.body, self.cancel = target, body, cancel

    def __iter__(self) -> Iterator[StreamEvent]:
        loop = asyncio.new_event_loop()
        events = stream_chat(self.target, self.body)
        try:
            while not self.cancel.cancelled:
                task = loop.create_task(anext(events))  # type: ignore[arg-type]
                while not task.done() and not self.cancel.cancelled:
                    loop.run_until_complete(asyncio.wait({task}, timeout=POLL_S))
                if not task.done():  # cancelled while waiting: close the request now
                    task.cancel()
                    loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
                    return
                try:
                    event = task.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            loop.run_until_complete(events.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
