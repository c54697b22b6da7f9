"""The chat's behaviour: send, stop, regenerate, continue, edit, switch branches, streaming into the view and the history.

The model's prompt is the conversation as stored (:class:`app.chat.shown_branch.ShownBranch`), not
as the widgets show it; the view finds the widget of a stored message itself.

Editing a message or regenerating an answer starts a new branch from there; the old one stays
reachable through the message's arrows (core.chat.branches). Each chat has its own system prompt.
The growing answer is saved about once a second; an answer that ends early is marked stopped (the
user pressed Stop), truncated (it reached the token limit) or interrupted (an error, or the app
closed mid-answer). Continue extends such an answer in place.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from app.bridge.model_worker import ModelWorker
from app.chat.composer import Composer
from app.chat.message_widget import MessageWidget
from app.chat.shown_branch import ShownBranch
from app.chat.view import ChatView
from app.settings.live import LiveSettings
from core.chat.history import HistoryError, HistoryStore, StoredMessage
from core.chat.prompt import Message
from core.engine.answer_job import AnswerFigures, AnswerOutcome, AnswerRequest, AnswerStart
from core.lookahead.finish import FinishReason
from core.progress import CancelToken
from core.settings import SamplingSettings

log = logging.getLogger(__name__)

AUTOSAVE_MS = 1000
TITLE_LENGTH = 48


@dataclass
class LiveAnswer:
    """The answer being generated."""

    conversation_id: int
    message_id: int
    cancel: CancelToken
    job_id: int = 0
    prefix: str = ""  # the text already there when continuing a cut-off answer
    text: str = ""  # the whole answer so far, prefix included
    saved_text: str = ""
    started_at: float = field(default_factory=time.monotonic)
    start: AnswerStart | None = None
    figures: AnswerFigures | None = None
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # what the answer samples with
    replaces: str | None = None  # a regenerated answer: the text of the one it was generated again for

    def live_rate(self) -> float:
        """Tokens per second of wall time since the prompt was ready (updates even between steps)."""
        if self.figures is None:
            return 0.0
        elapsed = time.monotonic() - self.started_at
        return self.figures.new_tokens / elapsed if elapsed > 0 else 0.0

    def context(self) -> tuple[int, int] | None:
        """(Tokens of the context in use, the model's context length), once the prompt is built (a remote
        model's context is not known: None)."""
        if self.start is None or self.figures is None or not self.start.context_length:
            return None
        return self.start.prompt_tokens + self.figures.new_tokens, self.start.context_length


def title_from(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "New chat"
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def context_note(start: AnswerStart) -> str:
    """What the user should know about the prompt: turns left out, a fallback used."""
    notes = [start.note] if start.note else []
    if start.dropped_messages:
        turns = "message was" if start.dropped_messages == 1 else "messages were"
        notes.insert(
            0,
            f"{start.dropped_messages} earlier {turns} left out to fit the model's context of "
            f"{start.context_length} tokens (the system prompt is kept).",
        )
    return " ".join(notes)


def same_answer_note(sampling: SamplingSettings) -> str:
    """Why a regenerated answer came out as before: sampling that repeats itself ("" when it does not)."""
    if sampling.greedy:
        return (
            "The same answer again: with temperature 0 (greedy, as the Precise preset) the model always gives it. "
            "For another, choose a preset that samples (Balanced, Creative)."
        )
    if sampling.seed is not None:
        return "The same answer again: a fixed sampling seed repeats it. For another, set Seed to random in Settings."
    return ""


class ChatController(QObject):
    """Connects the composer and the chat view to the history store and the model worker.

    ``branch`` is the active branch of the conversation on show, as stored; every message this
    controller writes goes through it.
    """

    busy_changed = Signal(bool)
    conversations_changed = Signal()
    system_prompt_changed = Signal()
    error = Signal(str)  # shown in the window's notice bar
    answer_done = Signal(object)  # AnswerOutcome

    def __init__(
        self,
        store: HistoryStore,
        worker: ModelWorker,
        view: ChatView,
        composer: Composer,
        settings: LiveSettings,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.worker = worker
        self.view = view
        self.composer = composer
        self.settings = settings
        self.branch = ShownBranch(store)
        self.own_system_prompt: str | None = None  # the current chat's; None: the default from Settings
        self.live: LiveAnswer | None = None
        self._unsaved: tuple[int, str, str, AnswerOutcome] | None = None
        self._save_failure: str | None = None  # why saving failed last, until a save works again
        self._autosave = QTimer(self, interval=AUTOSAVE_MS)
        self._autosave.timeout.connect(self.save_progress)
        queued = Qt.ConnectionType.QueuedConnection
        worker.answers.started.connect(self._started, queued)
        worker.answers.delta.connect(self._delta, queued)
        worker.answers.ended.connect(self._finished, queued)
        composer.send_requested.connect(self.send)
        composer.stop_requested.connect(self.stop)
        view.edit_submitted.connect(self.edit)
        view.regenerate_requested.connect(self.regenerate)
        view.continue_requested.connect(self.continue_answer)
        view.branch_requested.connect(self.switch_branch)

    @property
    def busy(self) -> bool:
        return self.live is not None

    @property
    def current_id(self) -> int | None:
        """The conversation on show (None: a new chat, not stored until its first message)."""
        return self.branch.conversation_id

    # --- conversations ----------------------------------------------------------------------------

    def open(self, conversation_id: int | None) -> None:
        """Show a conversation's active branch (None: an empty new chat)."""
        self.branch.show(conversation_id)
        self.own_system_prompt = None
        self.view.clear()
        if conversation_id is not None:
            try:
                conversation = self.store.conversation(conversation_id)
            except HistoryError as err:
                self.error.emit(str(err))
                conversation = None
            self.own_system_prompt = conversation.system_prompt if conversation is not None else None
            self._reshow(0)
            self.view.scroll_to_bottom()
        self.system_prompt_changed.emit()

    @property
    def system_prompt(self) -> str:
        """The current chat's system prompt ("" for none)."""
        return self.settings.current.system_prompt if self.own_system_prompt is None else self.own_system_prompt

    def set_system_prompt(self, text: str | None) -> None:
        """Give the current chat its own system prompt (None: the default from Settings); a new chat keeps
        it until its first message creates it."""
        if self.current_id is not None:
            try:
                self.store.set_system_prompt(self.current_id, text)
            except HistoryError as err:
                self.error.emit(str(err))
                return
        self.own_system_prompt = text
        self.system_prompt_changed.emit()

    def delete(self, conversation_id: int) -> bool:
        """Delete a conversation (not while it is generating); True when deleted."""
        if self.live is not None and self.live.conversation_id == conversation_id:
            self.error.emit("This chat is generating an answer: press Stop first, then delete it.")
            return False
        try:
            self.store.delete(conversation_id)
        except HistoryError as err:
            self.error.emit(str(err))
            return False
        self.worker.forget(conversation_id)
        if self.current_id == conversation_id:
            self.open(None)
        self.conversations_changed.emit()
        return True

    # --- user actions -----------------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Send ``text`` as the next user message."""
        if self.busy or not text.strip():
            return
        try:
            if self.current_id is None:
                self.branch.show(self.store.create_conversation(title_from(text), self.system_prompt).id)
                self.own_system_prompt = self.system_prompt
                self.system_prompt_changed.emit()  # the chat's own copy from now on
            user = self.branch.add("user", text, parent_id=self._parent_of(len(self.view.messages)))
        except HistoryError as err:
            self.error.emit(str(err))
            return
        self.composer.box.clear()
        self._show(user)
        self._answer(user.id, len(self.view.messages))
        self.conversations_changed.emit()

    def edit(self, index: int, text: str) -> None:
        """Send ``text`` in place of user message ``index`` as a new branch from there, and answer it."""
        if self.busy:
            self.error.emit("An answer is being generated: press Stop (Esc) first, then save your edit.")
            return
        if self.current_id is None or not text.strip() or self.view.messages[index].role != "user":
            return
        try:
            user = self.branch.add("user", text, parent_id=self._parent_of(index))
        except HistoryError as err:
            self.error.emit(str(err))
            return
        self.worker.forget(self.current_id)
        self._answer(user.id, index)
        self.conversations_changed.emit()

    def switch_branch(self, index: int, step: int) -> None:
        """Show the previous (``step`` -1) or next (+1) version of message ``index``, with its branch's continuation."""
        if self.busy or self.current_id is None:
            return
        try:
            message_id = self._id_at(index)
            siblings = self.store.branches(self.current_id).siblings(message_id)
            position = siblings.index(message_id) + step
            if not 0 <= position < len(siblings):
                return
            self.store.choose(siblings[position])
        except HistoryError as err:
            self.error.emit(str(err))
            return
        self.worker.forget(self.current_id)
        self._reshow(index)

    def stop(self) -> None:
        """Stop the answer: the worker ends it within one decoding step; one still queued behind
        other model work (a load, a comparison) ends here and now."""
        live = self.live
        if live is None:
            return
        live.cancel.cancel()
        if live.start is None:  # not started: nothing was generated; the worker will skip it
            self._finished(live.job_id, AnswerOutcome("", FinishReason.CANCELLED, None))

    def regenerate(self, index: int | None = None) -> None:
        """Generate answer ``index`` (by default the last) again, as a new branch beside the old one."""
        index = self._last_index("assistant") if index is None else index
        if self.busy or index < 0 or self.view.messages[index].role != "assistant":
            return
        replaced = self.view.messages[index].text
        self.worker.forget(self.current_id)
        self._answer(self._parent_of(index), index)
        if self.live is not None:
            self.live.replaces = replaced

    def continue_answer(self) -> None:
        """Extend the last answer from where it was cut off: the same message grows, and is saved as it does."""
        index = len(self.view.messages) - 1
        if self.busy or index < 0 or not self.view.messages[index].continuable:
            return
        widget = self.view.messages[index]
        if not self._save(self._id_at(index), widget.text, asked=True, status="generating"):
            return
        widget.set_note("")
        self._start(self._id_at(index), widget.text)

    def edit_last(self) -> None:
        """Open the editor of the last user message."""
        index = self._last_index("user")
        if self.busy or index < 0:
            return
        widget = self.view.messages[index]
        widget.begin_edit()
        self.view.ensureWidgetVisible(widget)

    def copy_last_answer(self) -> None:
        index = self._last_index("assistant")
        if index >= 0:
            self.view.messages[index].copy_text()

    # --- generation -------------------------------------------------------------------------------

    def _answer(self, parent_id: int | None, index: int) -> None:
        """Add an empty answer after message ``parent_id`` and generate it; the view changes from position
        ``index`` on (re-read from the history when that is before its end: a new branch)."""
        assert self.current_id is not None
        try:
            stored = self.branch.add("assistant", "", parent_id=parent_id, status="generating")
        except HistoryError as err:
            self.error.emit(str(err))
            stored = None
        if index < len(self.view.messages):
            if not self._reshow(index):
                return
        elif stored is not None:
            self._show(stored)
        if stored is not None:
            self._start(stored.id, "")

    def _start(self, message_id: int, prefix: str) -> None:
        """Generate into stored message ``message_id``, which holds ``prefix`` (the model continues it); the
        prompt is the stored branch up to that message."""
        assert self.current_id is not None
        settings = self.settings.current
        history = self.branch.prompt_until(message_id)
        messages = ([Message("system", self.system_prompt)] if self.system_prompt else []) + history
        token = CancelToken()
        self.live = LiveAnswer(
            self.current_id,
            message_id,
            token,
            prefix=prefix,
            text=prefix,
            saved_text=prefix,
            sampling=settings.sampling,
        )
        self.live.job_id = self.worker.generate(
            AnswerRequest(
                tuple(messages),
                settings.mode,
                settings.lookahead,
                settings.sampling,
                self.current_id,
                token,
                settings.remote.source(),
            )
        )
        widget = self._live_widget()
        if widget is not None:
            widget.set_status("waiting")  # until the model starts on it (it may be loading, or busy elsewhere)
        self._autosave.start()
        self.view.set_busy(True)
        self.composer.set_busy(True)
        self.busy_changed.emit(True)

    def _live_widget(self) -> MessageWidget | None:
        return self._live_widget_for(self.live) if self.live is not None else None

    def _started(self, job_id: int, start: AnswerStart) -> None:
        if self.live is None or job_id != self.live.job_id:
            return
        self.live.start = start
        self.live.started_at = time.monotonic()
        self.live.figures = AnswerFigures(start.mode, prompt_tokens=start.prompt_tokens)
        widget = self._live_widget()
        if widget is not None:
            widget.set_status("generating")
            widget.set_note(context_note(start))

    def _delta(self, job_id: int, text: str, figures: AnswerFigures) -> None:
        if self.live is None or job_id != self.live.job_id:
            return
        self.live.text += text
        self.live.figures = figures
        widget = self._live_widget()
        if widget is not None:
            widget.append(text)

    def _finished(self, job_id: int, outcome: AnswerOutcome) -> None:
        live = self.live
        if live is None or job_id != live.job_id:
            return
        self.live = None
        text = live.prefix + outcome.text if outcome.text else live.text
        if outcome.error:
            status = "interrupted"
        elif outcome.finish_reason == FinishReason.CANCELLED:
            status = "stopped"
        elif outcome.finish_reason == FinishReason.LENGTH:
            status = "truncated"
        else:
            status = "complete"
        widget = self._live_widget_for(live)
        if widget is not None:
            widget.finish(text)
            widget.set_status(status)
            if outcome.figures is not None:
                widget.set_figures(outcome.figures.summary())
            if outcome.error:
                widget.set_note(outcome.error)
            elif text == live.replaces:
                widget.set_note(
                    " ".join(part for part in (widget.note.text(), same_answer_note(live.sampling)) if part)
                )
        self._unsaved = (live.message_id, text, status, outcome)
        self._flush_unsaved()
        if outcome.error:
            self.error.emit(outcome.error)
        self.view.set_busy(False)
        self.composer.set_busy(False)
        self.busy_changed.emit(False)
        self.answer_done.emit(outcome)

    def _live_widget_for(self, live: LiveAnswer) -> MessageWidget | None:
        if live.conversation_id != self.current_id:
            return None
        return self.view.widget_for(live.message_id)

    # --- saving -----------------------------------------------------------------------------------

    def save_progress(self) -> None:
        """Save the growing answer (called every second) and retry a final save that failed."""
        self._flush_unsaved()
        live = self.live
        if live is not None and live.text != live.saved_text:
            if self._save(live.message_id, live.text, mode=live.start.mode if live.start else None):
                live.saved_text = live.text
        if live is None and self._unsaved is None:
            self._autosave.stop()

    def shutdown(self) -> None:
        """Closing mid-answer: stop it and save what was generated, marked interrupted."""
        live = self.live
        if live is not None:
            live.cancel.cancel()
            self.live = None
            self._save(
                live.message_id,
                live.text,
                status="interrupted",
                mode=live.start.mode if live.start else None,
                stats=live.figures.as_dict() if live.figures else None,
            )
        self._flush_unsaved()
        self._autosave.stop()

    def _flush_unsaved(self) -> None:
        if self._unsaved is None:
            return
        message_id, text, status, outcome = self._unsaved
        figures = outcome.figures
        if self._save(
            message_id,
            text,
            status=status,
            mode=figures.mode if figures else None,
            stats=figures.as_dict() if figures else None,
        ):
            self._unsaved = None
            self.conversations_changed.emit()
        elif not self._autosave.isActive():
            self._autosave.start()

    def _save(self, message_id: int, text: str, asked: bool = False, **fields) -> bool:
        """Write the message; a failure is told once while saving keeps failing the same way (saves are
        retried every second), and always when the user ``asked`` for what needed the save."""
        try:
            self.branch.update(message_id, text, **fields)
        except HistoryError as err:
            if asked or str(err) != self._save_failure:
                log.warning("saving the answer failed: %s", err)
                self.error.emit(str(err))
            self._save_failure = str(err)
            return False
        if self._save_failure is not None:
            log.info("saving the answer works again")
            self._save_failure = None
        return True

    # --- view bookkeeping -------------------------------------------------------------------------

    def _show(self, message: StoredMessage) -> MessageWidget:
        widget = self.view.add_message(message.role, message.content, message.status, message.id)
        figures = AnswerFigures.from_dict(message.stats, message.mode)
        if figures is not None:
            widget.set_figures(figures.summary())
        if self.live is not None and self.live.message_id == message.id:
            widget.set_text(self.live.text)
            widget.set_status("generating" if self.live.start is not None else "waiting")
            if self.live.start is not None:
                widget.set_note(context_note(self.live.start))
        return widget

    def _reshow(self, index: int) -> bool:
        """Show the active branch from view position ``index`` on (the tree changed there), and every
        message's branch arrows; False when the history could not be read."""
        assert self.current_id is not None
        try:
            branches = self.branch.read()
        except HistoryError as err:
            self.error.emit(str(err))
            return False
        self.view.remove_from(index)
        for message in branches.path[index:]:
            self._show(message)
        for widget in self.view.messages:
            widget.set_branch(*branches.position(self._id_of(widget)))
        return True

    def _last_index(self, role: str) -> int:
        return max((i for i, m in enumerate(self.view.messages) if m.role == role), default=-1)

    def _parent_of(self, index: int) -> int | None:
        """The stored message before view position ``index`` (None at the start)."""
        return self._id_at(index - 1) if index > 0 else None

    def _id_at(self, index: int) -> int:
        return self._id_of(self.view.messages[index])

    @staticmethod
    def _id_of(widget: MessageWidget) -> int:
        assert widget.message_id is not None  # the controller shows stored messages only
        return widget.message_id
