"""Response bodies in the OpenAI shapes: full completions, stream chunks, usage, server-sent events."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from core.server.answer_events import Ended

MODE_HEADER = "X-Lookahead-Mode"
TOKENS_PER_STEP_HEADER = "X-Lookahead-Tokens-Per-Step"


def usage(ended: Ended) -> dict[str, int]:
    return {
        "prompt_tokens": ended.prompt_tokens,
        "completion_tokens": ended.completion_tokens,
        "total_tokens": ended.prompt_tokens + ended.completion_tokens,
    }


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


class Shapes:
    """The bodies of one response: a chat completion or a text completion, with one id and timestamp."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def full(self, text: str, ended: Ended) -> dict[str, Any]:
        """The non-streamed body; ``lookahead`` is the extension field (mode, tokens per step)."""
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": ended.finish_reason,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": ended.finish_reason}
        return {**self._head(False), "choices": [choice], "usage": usage(ended), "lookahead": ended.lookahead}

    def chunk(self, text: str | None = None, *, first: bool = False, ended: Ended | None = None) -> dict[str, Any]:
        """A stream chunk: the first (chat: the role), a text delta, or the last (finish reason, ``lookahead``)."""
        finish = ended.finish_reason if ended is not None else None
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        body = {**self._head(True), "choices": [choice]}
        if ended is not None:
            body["lookahead"] = ended.lookahead
        return body

    def usage_chunk(self, ended: Ended) -> dict[str, Any]:
        """The extra last chunk ``stream_options.include_usage`` asks for: no choices, the usage."""
        return {**self._head(True), "choices": [], "usage": usage(ended), "lookahead": ended.lookahead}

    def _head(self, streamed: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}
