"""Turn a conversation into prompt token ids: the model's chat template, or a plain fallback.

When the conversation outgrows the context, the oldest turns are left out (the system prompt
stays) and the caller is told how many. The work is bounded by the part that fits, not by the
length of the conversation: the cut is estimated from the newest messages' token counts and
then checked with a few encodings of the kept part.

Two fallbacks, both documented in docs/design.md:

- a model without a chat template gets the plain template 'System: ...', 'User: ...', 'Assistant: ';
- a template that refuses the system role (Gemma-style ``raise_exception('System role not
  supported')``) gets the system prompt folded into the first user turn, and :attr:`Prompt.note`
  says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYSTEM_FOLDED_NOTE = (
    "This model's chat template has no system role: the system prompt was put at the start of the first user message."
)


class PromptError(ValueError):
    """The conversation cannot be turned into a prompt; the message says what to do."""


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str


@dataclass(frozen=True)
class Prompt:
    """Prompt ids, how many earlier messages had to be left out to fit the context, and a note
    for the user when a fallback was used (empty otherwise)."""

    ids: list[int]
    dropped_messages: int
    note: str = ""


@dataclass(frozen=True)
class Encoded:
    """Token ids of a conversation, and whether its system prompt had to be folded into a user turn."""

    ids: list[int]
    system_folded: bool = False


def render_plain(messages: list[Message]) -> str:
    """The documented fallback template for models without a chat template."""
    names = {"system": "System", "user": "User", "assistant": "Assistant"}
    parts = [f"{names.get(m.role, m.role.title())}: {m.content}\n\n" for m in messages]
    return "".join(parts) + "Assistant: "


def fold_system(messages: list[Message]) -> list[Message]:
    """The system prompt moved to the start of the first user message (a user message of its own if there is none)."""
    system, rest = messages[0], list(messages[1:])
    for index, message in enumerate(rest):
        if message.role == "user":
            rest[index] = Message("user", f"{system.content}\n\n{message.content}")
            return rest
    return [Message("user", system.content), *rest]


def encode(tokenizer: Any, messages: list[Message]) -> Encoded:
    """Token ids of ``messages`` followed by the start of the assistant's answer.

    When the last message is the assistant's, the prompt ends with its text instead (no end of
    turn), so the model continues that answer: Continue on an answer cut off by the token limit.

    Raises:
        PromptError: the chat template refuses the conversation even with the system prompt folded.
    """
    partial = ""
    if messages and messages[-1].role == "assistant":
        messages, partial = messages[:-1], messages[-1].content
    if not getattr(tokenizer, "chat_template", None):
        return Encoded(list(tokenizer(render_plain(messages) + partial)["input_ids"]))
    from jinja2.exceptions import (
        TemplateError,  # jinja2 comes with transformers' chat templates, not with transformers itself
    )

    try:
        return Encoded(_apply_template(tokenizer, messages, partial))
    except TemplateError as err:
        if not messages or messages[0].role != "system":
            raise PromptError(_template_refused(err)) from err
    try:
        return Encoded(_apply_template(tokenizer, fold_system(messages), partial), system_folded=True)
    except TemplateError as err:
        raise PromptError(_template_refused(err)) from err


def encode_messages(tokenizer: Any, messages: list[Message]) -> list[int]:
    """Token ids of ``messages`` followed by the start of the assistant's answer (see :func:`encode`)."""
    return encode(tokenizer, messages).ids


def _apply_template(tokenizer: Any, messages: list[Message], partial: str = "") -> list[int]:
    dicts = [{"role": m.role, "content": m.content} for m in messages]
    text = tokenizer.apply_chat_template(dicts, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text + partial, add_special_tokens=False)["input_ids"])


def _template_refused(err: Exception) -> str:
    return (
        f"The model's chat template refused this conversation ({err}). "
        "Edit the last message, start a new chat, or choose another model in Settings."
    )


def build_prompt(tokenizer: Any, messages: list[Message], budget: int) -> Prompt:
    """Encode ``messages`` in at most ``budget`` tokens, dropping the fewest oldest non-system turns.

    Raises:
        PromptError: when even the system prompt and the last message do not fit, or the template
            refuses the conversation.
    """
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system) :]
    if not rest:
        encoded = encode(tokenizer, system)
        if len(encoded.ids) > budget:
            raise PromptError(_too_long(budget))
        return _prompt(encoded, 0)
    return _PromptSearch(tokenizer, system, rest, budget).run()


def raw_prompt(tokenizer: Any, text: str, budget: int) -> Prompt:
    """``text`` encoded as is (no chat template), for a text completion.

    Raises:
        PromptError: when it is empty or takes more than ``budget`` tokens.
    """
    ids = list(tokenizer(text)["input_ids"])
    if not ids:
        raise PromptError("The prompt is empty: give the text to continue.")
    if len(ids) > budget:
        raise PromptError(_too_long(budget))
    return Prompt(ids, 0)


def _prompt(encoded: Encoded, dropped: int) -> Prompt:
    return Prompt(encoded.ids, dropped, SYSTEM_FOLDED_NOTE if encoded.system_folded else "")


def _too_long(budget: int) -> str:
    return (
        f"The message is too long for the model's context ({budget} tokens are left for the prompt). "
        "Shorten the message, lower 'max new tokens', or use a model with a longer context."
    )


class _PromptSearch:
    """Finds the fewest oldest turns to drop with a few encodings of what is kept.

    The kept part starts at a user message (templates that insist on alternating roles refuse
    anything else). A cut fits when ``system + rest[cut:]`` encodes within the budget; fewer kept
    turns never take more tokens. The first guess comes from the newest messages' own token
    counts plus the template's overhead per message; encodings then bracket the answer
    (``over`` does not fit, ``fit`` fits) and narrow the bracket until they meet, so the answer
    is exact.
    """

    def __init__(self, tokenizer: Any, system: list[Message], rest: list[Message], budget: int) -> None:
        self.tokenizer, self.system, self.rest, self.budget = tokenizer, system, rest, budget
        last = len(rest) - 1
        self.cuts = [i for i, m in enumerate(rest) if i in (0, last) or m.role == "user"]
        self.encoded: dict[int, Encoded] = {}

    def run(self) -> Prompt:
        over, fit = -1, len(self.cuts) - 1  # positions in self.cuts
        if not self._fits(fit):
            raise PromptError(_too_long(self.budget))
        if fit > 0:
            # Gallop from the guess (steps 1, 2, 4, ...) until the answer is bracketed, so no
            # encoding is much longer than what fits; then halve the bracket.
            guess = min(self._first_guess(), fit - 1)
            shrinking = self._fits(guess)  # the guess fits: look for more turns that fit too
            fit, over = (guess, over) if shrinking else (fit, guess)
            step = 1
            while fit - over > 1:
                guess = max(fit - step, over + 1) if shrinking else min(over + step, fit - 1)
                if not over < guess < fit:
                    break
                if self._fits(guess):
                    fit = guess
                    if not shrinking:
                        break
                else:
                    over = guess
                    if shrinking:
                        break
                step *= 2
        while fit - over > 1:
            middle = (over + fit) // 2
            if self._fits(middle):
                fit = middle
            else:
                over = middle
        return _prompt(self.encoded[fit], self.cuts[fit])

    def _fits(self, position: int) -> bool:
        encoded = encode(self.tokenizer, self.system + self.rest[self.cuts[position] :])
        self.encoded[position] = encoded
        return len(encoded.ids) <= self.budget

    def _first_guess(self) -> int:
        """The first cut the newest messages' token counts allow, walking back from the last one."""
        last = len(self.rest) - 1
        used = len(self.encoded[len(self.cuts) - 1].ids)
        content = sum(self._content_tokens(m) for m in (*self.system, self.rest[last]))
        overhead = max(0, used - content) / (1 + len(self.system))
        first = 0
        for index in range(last - 1, -1, -1):
            used += self._content_tokens(self.rest[index]) + overhead
            if used > self.budget:
                first = index + 1
                break
        return next(position for position, cut in enumerate(self.cuts) if cut >= first)

    def _content_tokens(self, message: Message) -> int:
        return len(self.tokenizer(message.content, add_special_tokens=False)["input_ids"])
