"""The live figures at the bottom: device and memory, state and tok/s, tokens per step, context.

Its texts shorten with "…" to the room they get (the whole text is in the tooltip), so no status
text makes the window wider than a small screen: Auto's reason alone can take 1,300 px.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolButton, QWidget

from app.chat.elided_label import ElidedLabel
from core.engine.answer_job import AnswerFigures
from core.engine.ready import ModelInfo

AUTO_TIP = "What Auto runs, from a short measurement of this machine made once per model, dtype and thread count"


class FiguresBar(QStatusBar):
    """Always-visible figures; the window updates them several times a second while generating. After a
    first load on a machine, the background work's stage and progress, with Cancel (never a blocking panel)."""

    cancel_background = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.device = ElidedLabel("no model")
        self.state = ElidedLabel("starting")
        self.rate = QLabel("")
        self.step = QLabel("")
        self.context = QLabel("")
        self.auto = ElidedLabel("", AUTO_TIP)
        for label in (self.device, self.state, self.rate, self.step):
            self.addWidget(label)
        self.addWidget(self.auto, 1)  # the longest text takes the room left over
        self.background = QLabel("")
        self.background_bar = QProgressBar(minimum=0, maximum=1000, textVisible=False, maximumWidth=90)
        self.background_cancel = QToolButton(text="Cancel", toolTip="Stop the background measurement")
        self.background_cancel.clicked.connect(self.cancel_background)
        for widget in (self.background, self.background_bar, self.background_cancel):
            self.addPermanentWidget(widget)
        self.addPermanentWidget(self.context)
        self.background_bar.hide()
        self.background_cancel.hide()

    def set_model(self, info: ModelInfo | None) -> None:
        if info is None:
            self.device.setText("no model")
            self.context.setText("")
            return
        prefix = "GPU: " if info.device_kind == "cuda" else ""
        self.device.setText(f"{prefix}{info.device_label} · {info.precision}")
        self.auto.setText(info.auto_reason)
        self.set_context(0, info.context_length)

    def show_background(self, stage: str, fraction: float) -> None:
        """The background work in progress: its stage (in the tooltip), a bar, Cancel."""
        self.background.setText(f"{fraction * 100:.0f}%")
        self.background.setToolTip(stage)
        self.background_bar.setToolTip(stage)
        self.background_bar.setValue(int(fraction * 1000))
        self.background_bar.show()
        self.background_cancel.show()

    def background_done(self, message: str) -> None:
        """The background work ended: what got faster ("" if nothing), in place of its bar."""
        self.background.setText(message)
        self.background.setToolTip(message)
        self.background_bar.hide()
        self.background_cancel.hide()

    def set_device_label(self, label: str, kind: str, precision: str) -> None:
        prefix = "GPU: " if kind == "cuda" else ""
        self.device.setText(f"{prefix}{label} · {precision}")

    def set_state(self, text: str) -> None:
        self.state.setText(text)

    def set_rate(self, tokens_per_second: float | None, tokens_per_step: float | None) -> None:
        self.rate.setText("" if tokens_per_second is None else f"{tokens_per_second:.1f} tok/s")
        self.step.setText("" if tokens_per_step is None else f"{tokens_per_step:.2f} tokens/step")

    def set_context(self, used: int, maximum: int) -> None:
        self.context.setText(f"context {used} / {maximum}")

    def show_live(
        self,
        started: bool,
        tokens_per_second: float | None,
        tokens_per_step: float | None,
        context: tuple[int, int] | None,
    ) -> None:
        """The answer being generated: ``started`` once the model works on it (before: waiting behind other
        work), wall-clock tok/s (moves between steps too), tokens/step, and (tokens used, context length)."""
        self.set_state("generating" if started else "waiting for the model")
        self.set_rate(tokens_per_second, tokens_per_step)
        if context is not None:
            self.set_context(*context)

    def show_final(self, figures: AnswerFigures, model: ModelInfo | None) -> None:
        """The last answer's final figures, kept until the next one starts."""
        self.set_state(f"last answer ({figures.mode})")
        self.set_rate(figures.tokens_per_second, None if figures.remote else figures.tokens_per_step)
        if model is not None:
            self.set_context(figures.prompt_tokens + figures.new_tokens, model.context_length)
