"""OpenAI request bodies checked and turned into one :class:`CompletionRequest` (or a 4xx :class:`ApiError`).

Only what the server honours is accepted: a field it would silently ignore with a different
meaning (``n`` > 1, tools, log-probabilities, non-zero penalties) is refused with a 400 that names
it. Unknown extra fields (``user``, ``metadata``) are ignored, as the OpenAI API does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from core.chat.prompt import Message
from core.server.errors import ApiError, bad_param
from core.settings import MAX_SEED, MODES, SamplingSettings

MAX_STOP = 4  # the OpenAI API's limit
MAX_MESSAGES = 4096
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True)
class CompletionRequest:
    """One chat completion (``messages``) or text completion (``prompt``) to generate.

    ``None`` fields take the app's settings (Settings, Generation); ``mode`` is the decoding mode
    extension (``auto``, ``plain`` or ``lookahead``).
    """

    model: str
    messages: tuple[Message, ...] = ()
    prompt: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    mode: str | None = None

    @property
    def chat(self) -> bool:
        return self.prompt is None

    def sampling(self, defaults: SamplingSettings, max_tokens_limit: int) -> SamplingSettings:
        """The app's sampling settings with this request's values; ``max_tokens`` is capped by the server's limit."""
        changes: dict[str, Any] = {"max_new_tokens": self.max_tokens or min(defaults.max_new_tokens, max_tokens_limit)}
        for name in ("temperature", "top_p", "seed"):
            if getattr(self, name) is not None:
                changes[name] = getattr(self, name)
        if self.stop is not None:
            changes["stop_strings"] = self.stop
        return replace(defaults, **changes)


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; a 400 for anything else (bad UTF-8, bad JSON, NaN, deep nesting,
    a lone surrogate escape such as ``\\ud800``, which is no text: the tokenizer would fail on it)."""
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ApiError(
            400, f"The request body is not valid JSON ({_short(err)}). Send a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_json")
    _check_text(data)
    return data


def _check_text(data: dict[str, Any]) -> None:
    """A 400 naming a string (value or key) that holds a lone surrogate; iterative, as JSON may nest deep."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str) and not _encodable(value):
            raise bad_param(
                path,
                f"{path} holds a lone surrogate ({_short(value)}), which is not text: send whole characters "
                "(one beyond U+FFFF as a pair of \\u escapes, or as UTF-8).",
            )
        if isinstance(value, dict):
            if not all(_encodable(key) for key in value):
                where = path or "the body"
                raise ApiError(400, f"A field name in {where} holds a lone surrogate.", param=path or None)
            stack.extend((f"{path}.{key}" if path else key, item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}[{index}]", item) for index, item in reversed(list(enumerate(value))))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_chat(data: dict[str, Any], max_tokens_limit: int) -> CompletionRequest:
    """A ``/v1/chat/completions`` body."""
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_param("messages", "'messages' must be a non-empty list of {role, content} objects.")
    if len(messages) > MAX_MESSAGES:
        raise bad_param("messages", f"At most {MAX_MESSAGES} messages per request (got {len(messages)}).")
    parsed = tuple(_message(m, i) for i, m in enumerate(messages))
    if _optional(data, "response_format", dict) and data["response_format"].get("type", "text") != "text":
        raise bad_param("response_format", "Only the 'text' response format is supported.")
    if data.get("tools") or data.get("functions"):
        raise bad_param("tools", "Tools and function calling are not supported by this server.")
    if data.get("logprobs") or data.get("top_logprobs"):
        raise bad_param("logprobs", "Log-probabilities are not supported by this server.")
    return _common(data, max_tokens_limit, messages=parsed)


def parse_completion(data: dict[str, Any], max_tokens_limit: int) -> CompletionRequest:
    """A ``/v1/completions`` body: ``prompt`` is one text (or a list holding one text)."""
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad_param("prompt", "'prompt' must be one non-empty text (token arrays and batches are not supported).")
    for name in ("echo", "logprobs", "suffix"):
        if data.get(name):
            raise bad_param(name, f"'{name}' is not supported by this server.")
    if data.get("best_of", 1) != 1:
        raise bad_param("best_of", "'best_of' must be 1.")
    return _common(data, max_tokens_limit, prompt=prompt)


def _common(data: dict[str, Any], max_tokens_limit: int, **what: Any) -> CompletionRequest:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param("model", "'model' must name a model; GET /v1/models lists the one loaded.")
    if data.get("n", 1) not in (1, None) or isinstance(data.get("n"), bool):
        raise bad_param("n", "Only one choice per request is supported ('n' must be 1).")
    for name in ("frequency_penalty", "presence_penalty"):
        if _number(data, name, -2.0, 2.0) not in (None, 0.0):
            raise bad_param(
                name, f"'{name}' is not supported; the app's repetition penalty (Settings, Generation) applies."
            )
    max_tokens = _whole(data, "max_completion_tokens", 1, max_tokens_limit)
    max_tokens = _whole(data, "max_tokens", 1, max_tokens_limit) if max_tokens is None else max_tokens
    stream = bool(_optional(data, "stream", bool))
    options = _optional(data, "stream_options", dict) or {}
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad_param("stream_options", "'stream_options.include_usage' must be true or false.")
    mode = _optional(data, "lookahead_mode", str)
    if mode is not None and mode not in MODES:
        raise bad_param("lookahead_mode", f"'lookahead_mode' must be one of {', '.join(MODES)} (got {mode!r}).")
    return CompletionRequest(
        model=model,
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0, low_open=True),
        max_tokens=max_tokens,
        stop=_stop(data.get("stop")),
        seed=_whole(data, "seed", 0, MAX_SEED),
        stream=stream,
        include_usage=include_usage and stream,
        mode=mode,
        **what,
    )


def _message(item: Any, index: int) -> Message:
    param = f"messages[{index}]"
    if not isinstance(item, dict):
        raise bad_param(param, f"{param} must be an object with 'role' and 'content'.")
    role = item.get("role")
    if role not in ROLES:
        raise bad_param(f"{param}.role", f"{param}.role must be one of {', '.join(ROLES)} (got {_short(role)}).")
    content = item.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_param(f"{param}.content", f"{param}.content: only text parts are supported.")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad_param(f"{param}.content", f"{param}.content must be text or a list of text parts.")
    return Message(ROLES[role], content)


def _stop(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOP:
        raise bad_param("stop", f"'stop' must be a text or a list of at most {MAX_STOP} texts.")
    return tuple(s for s in stops if s)


def _optional(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if value is not None and not isinstance(value, kind):
        raise bad_param(name, f"'{name}' must be {_KIND_NAMES[kind]} (got {_short(value)}).")
    return value


def _number(data: dict[str, Any], name: str, low: float, high: float, low_open: bool = False) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad_param(name, f"'{name}' must be a number (got {_short(value)}).")
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise bad_param(name, f"'{name}' must be in {bracket}{low:g}, {high:g}] (got {value}).")
    return float(value)


def _whole(data: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_param(name, f"'{name}' must be a whole number (got {_short(value)}).")
    if not low <= value <= high:
        raise bad_param(name, f"'{name}' must be between {low} and {high} (got {value}).")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _short(value: Any) -> str:
    text = str(value) if isinstance(value, Exception) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_KIND_NAMES = {bool: "true or false", dict: "an object", str: "text"}
