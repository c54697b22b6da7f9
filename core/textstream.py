"""Token ids to text, incrementally: clean UTF-8 deltas, stop strings never shown in part."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
        self._released = 0  # characters of the decoded text already given out

    @property
    def text(self) -> str:
        """All released text."""
        return self._decoded()[: self._released]

    def push(self, ids: Sequence[int]) -> str:
        """Add ids; return the newly final text (maybe empty)."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        decoded = self._decoded()
        # A trailing replacement char is an incomplete multi-byte sequence: wait for more bytes.
        safe = len(decoded) - 1 if decoded.endswith("\ufffd") else len(decoded)
        for stop in self.stop_strings:
            at = decoded.find(stop, max(0, self._released - len(stop) + 1))
            if at != -1 and at <= safe:
                safe = at
                self.stopped = True
        if not self.stopped:
            safe = min(safe, self._hold_back(decoded, safe))
        delta = decoded[self._released : safe] if safe > self._released else ""
        self._released = max(self._released, safe)
        return delta

    def flush(self) -> str:
        """At the end: release whatever was held back for a stop string that never came."""
        if self.stopped:
            return ""
        decoded = self._decoded()
        delta = decoded[self._released :]
        self._released = len(decoded)
        return delta

    def _decoded(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def _hold_back(self, decoded: str, end: int) -> int:
        """Earliest index from which the text up to ``end`` could be the start of a stop string."""
        cut = end
        for stop in self.stop_strings:
            for k in range(min(len(stop) - 1, end), 0, -1):
                if decoded[end - k : end] == stop[:k]:
                    cut = min(cut, end - k)
                    break
        return cut
