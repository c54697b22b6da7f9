"""Token ids to text, incrementally: clean UTF-8 deltas, stop strings never shown in part.

Each step decodes only the tokens since the last released text plus the few before them (so that
a tokenizer's word-start spaces come out as in a full decode): the work per step does not grow
with the answer. Text is never cut inside a character: an incomplete multi-byte sequence (shown
by the tokenizer as U+FFFD at the end) waits for its remaining bytes, and at the end it is dropped
rather than given out as U+FFFD.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REPLACEMENT = "\ufffd"


class TextStream:
    """Accumulates generated ids and releases text that is final.

    Text that could still become a stop string is held back; when a stop string appears, the
    text before it is released and :attr:`stopped` becomes true.
    """

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = [s for s in stop_strings if s]
        self.ids: list[int] = []
        self.stopped = False
        self._context = 0  # ids[_context:_decoded] decode to the context the next decode starts from
        self._decoded = 0  # ids before this are in the text (released or pending)
        self._released: list[str] = []
        self._pending = ""  # decoded, held back for a possible stop string

    @property
    def text(self) -> str:
        """All released text."""
        if len(self._released) > 1:
            self._released = ["".join(self._released)]
        return self._released[0] if self._released else ""

    def push(self, ids: Sequence[int]) -> str:
        """Add ids; return the newly final text (maybe empty)."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        new = self._decode_new()
        if new is None:  # the last character is still incomplete
            return ""
        return self._release(self._pending + new, final=False)

    def flush(self) -> str:
        """At the end: release what was held back for a stop string that never came; an incomplete
        trailing character is dropped."""
        if self.stopped:
            return ""
        new = self._decode_new()
        if new is None:
            new = self._decode(self._context, len(self.ids))[len(self._decode(self._context, self._decoded)) :]
            new = new.rstrip(REPLACEMENT)
            self._decoded = len(self.ids)
        return self._release(self._pending + new, final=True)

    def _decode_new(self) -> str | None:
        """Text of the ids not yet decoded; None while it ends inside a character (nothing consumed)."""
        if self._decoded == len(self.ids):
            return ""
        context = self._decode(self._context, self._decoded)
        full = self._decode(self._context, len(self.ids))
        if full.endswith(REPLACEMENT):
            return None
        self._context, self._decoded = self._decoded, len(self.ids)
        return full[len(context) :]

    def _decode(self, start: int, end: int) -> str:
        return self.tokenizer.decode(self.ids[start:end], skip_special_tokens=True) if end > start else ""

    def _release(self, text: str, final: bool) -> str:
        """Give out ``text`` up to a stop string, keeping back what could start one (unless ``final``)."""
        cut = len(text)
        for stop in self.stop_strings:
            at = text.find(stop)
            if at != -1 and at < cut:
                cut = at
                self.stopped = True
        if not self.stopped and not final:
            cut = self._hold_back(text)
        delta, self._pending = text[:cut], ("" if self.stopped or final else text[cut:])
        if delta:
            self._released.append(delta)
        return delta

    def _hold_back(self, text: str) -> int:
        """Earliest index from which ``text``'s end could be the start of a stop string."""
        end = cut = len(text)
        for stop in self.stop_strings:
            for k in range(min(len(stop) - 1, end), 0, -1):
                if text.endswith(stop[:k]):
                    cut = min(cut, end - k)
                    break
        return cut
