"""The result strip: both rates, speed-up, time to first token, tokens per step, steps, identical output."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QWidget

from core.compare.summary import Spread, Summary

ERROR_COLOR = "#d93025"
OK_COLOR = "#188038"


class _Card(QFrame):
    """A caption, a big value and a small note."""

    def __init__(self, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.caption = QLabel(caption)
        self.caption.setStyleSheet("color: #80868b; font-size: 11px;")
        self.value = QLabel("\u2013")
        self.value.setStyleSheet("font-size: 17px; font-weight: 600;")
        self.note = QLabel("")
        self.note.setStyleSheet("font-size: 11px;")
        layout = QGridLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setVerticalSpacing(1)
        layout.addWidget(self.caption, 0, 0)
        layout.addWidget(self.value, 1, 0)
        layout.addWidget(self.note, 2, 0)

    def set_value(self, value: str, note: str = "", color: str | None = None) -> None:
        self.value.setText(value)
        self.value.setStyleSheet(f"font-size: 17px; font-weight: 600;{f' color: {color};' if color else ''}")
        self.note.setText(note)


def _spread_note(spread: Spread, unit: str = "") -> str:
    if spread.count < 2:
        return "1 run"
    return f"median of {spread.count} \u00b7 {spread.low:.2f}\u2013{spread.high:.2f}{unit} (\u00b1{spread.relative * 50:.0f}%)"


def difference_note(index: int | None, dtype: str) -> str:
    """Where the outputs part, and the likely cause for the model's precision."""
    cause = "a bug, please report it" if dtype in ("float32", "fp32") else f"{dtype} rounding (fp32 should match)"
    return f"from token {index}: {cause}"


class SummaryStrip(QWidget):
    """Shows a :class:`~core.compare.summary.Summary`; a difference in the outputs shows as an error."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plain = _Card("Plain")
        self.lookahead = _Card("Lookahead")
        self.speedup = _Card("Speed-up")
        self.first_token = _Card("Time to first token")
        self.per_step = _Card("Tokens per step")
        self.steps = _Card("Steps")
        self.output = _Card("Output (greedy)")
        self.output.setObjectName("output")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for card in self.cards:
            layout.addWidget(card, 1)
        layout.setAlignment(Qt.AlignmentFlag.AlignLeft)

    @property
    def cards(self) -> list[_Card]:
        return [self.plain, self.lookahead, self.speedup, self.first_token, self.per_step, self.steps, self.output]

    def text(self) -> str:
        """Everything the strip shows, one card per line (for tests and copying)."""
        return "\n".join(f"{c.caption.text()}: {c.value.text()} {c.note.text()}".strip() for c in self.cards)

    def clear(self) -> None:
        for card in self.cards:
            card.set_value("\u2013")

    def show_summary(self, summary: Summary | None, lookahead_label: str, dtype: str) -> None:
        self.lookahead.caption.setText(f"Lookahead {lookahead_label}")
        if summary is None:
            self.clear()
            self.output.set_value("stopped", "no repeat finished")
            return
        plain, ahead = summary.plain, summary.lookahead
        self.plain.set_value(f"{plain.tokens_per_second.median:.1f} tok/s", _spread_note(plain.tokens_per_second))
        self.lookahead.set_value(f"{ahead.tokens_per_second.median:.1f} tok/s", _spread_note(ahead.tokens_per_second))
        faster = summary.speedup.median >= 1.0
        self.speedup.set_value(
            f"{summary.speedup.median:.2f}x", _spread_note(summary.speedup, "x"), OK_COLOR if faster else None
        )
        self.first_token.set_value(
            f"{plain.time_to_first_token.median * 1000:.0f} / {ahead.time_to_first_token.median * 1000:.0f} ms",
            "plain / lookahead",
        )
        self.per_step.set_value(f"{plain.tokens_per_step:.2f} / {ahead.tokens_per_step:.2f}", "plain / lookahead")
        self.steps.set_value(f"{plain.steps} / {ahead.steps}", f"for {ahead.new_tokens} tokens")
        if summary.identical:
            self.output.set_value("\u2713 identical", "token for token", OK_COLOR)
            self.output.setToolTip("")
        else:
            self.output.set_value("\u2717 DIFFERENT", difference_note(summary.first_difference, dtype), ERROR_COLOR)
            self.output.setToolTip(
                "Greedy lookahead must give plain decoding's tokens. In fp32 a difference is a bug: please report it. "
                "In 16-bit precision, a wide lookahead step rounds differently from a one-token step, which can flip "
                "a near-tie between two tokens; load the model in fp32 to check exactness."
            )
