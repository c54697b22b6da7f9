"""Turn a conversation into prompt token ids: the model's chat template, or a plain fallback.

When the conversation outgrows the context, the oldest turns are left out (the system prompt
stays) and the caller is told how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FALLBACK_TEMPLATE_NOTE = (
    "The model has no chat template; the plain template 'System: ...', 'User: ...', 'Assistant: ' is used."
)


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str


@dataclass(frozen=True)
class Prompt:
    """Prompt ids and how many earlier messages had to be left out to fit the context."""

    ids: list[int]
    dropped_messages: int


def render_plain(messages: list[Message]) -> str:
    """The documented fallback template for models without a chat template."""
    names = {"system": "System", "user": "User", "assistant": "Assistant"}
    parts = [f"{names.get(m.role, m.role.title())}: {m.content}\n\n" for m in messages]
    return "".join(parts) + "Assistant: "


def encode_messages(tokenizer: Any, messages: list[Message]) -> list[int]:
    """Token ids of ``messages`` followed by the start of the assistant's answer.

    When the last message is the assistant's, the prompt ends with its text instead (no end of
    turn), so the model continues that answer: Continue on an answer cut off by the token limit.
    """
    partial = ""
    if messages and messages[-1].role == "assistant":
        messages, partial = messages[:-1], messages[-1].content
    if getattr(tokenizer, "chat_template", None):
        dicts = [{"role": m.role, "content": m.content} for m in messages]
        text = tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text + partial, add_special_tokens=False)["input_ids"])
    return list(tokenizer(render_plain(messages) + partial)["input_ids"])


def build_prompt(tokenizer: Any, messages: list[Message], budget: int) -> Prompt:
    """Encode ``messages`` in at most ``budget`` tokens, dropping the oldest non-system turns.

    Raises:
        ValueError: when even the system prompt and the last message do not fit.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system):]
    for dropped in range(len(rest)):
        ids = encode_messages(tokenizer, system + rest[dropped:])
        if len(ids) <= budget:
            return Prompt(ids, dropped)
    raise ValueError(
        f"The message is too long for the model's context ({budget} tokens are left for the prompt). "
        "Shorten the message, lower 'max new tokens', or use a model with a longer context."
    )
