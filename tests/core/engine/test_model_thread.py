"""The model thread's loads: a first load answers at once while Auto measures in the background, between answers."""

from __future__ import annotations

import os
import shutil
import threading
import time

from core.chat.history import HistoryStore
from core.chat.prompt import Message
from core.engine.answer_job import AnswerRequest
from core.engine.background import COMPILING, MEASURING, MEASURING_REASON, BackgroundCalibration
from core.engine.model_thread import ModelThread
from core.engine.ready import ReadyModel, make_ready
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.settings import LookaheadSettings, SamplingSettings
from tests.core.engine.test_answer_job import Heard


class Events:
    """What a model thread reports; ``on_background`` hears each background report first (on its thread)."""

    def __init__(self) -> None:
        self.progress: list[tuple[str, float]] = []
        self.background: list[tuple[str, float, float]] = []  # stage, fraction, when
        self.loaded, self.upgraded = threading.Event(), threading.Event()
        self.info, self.message = None, None
        self.on_background = lambda stage: None

    def load_progress(self, stage: str, fraction: float) -> None:
        self.progress.append((stage, fraction))

    def model_loaded(self, info) -> None:
        self.info = info
        self.loaded.set()

    def load_failed(self, message: str) -> None:
        self.info = message
        self.loaded.set()

    def background_progress(self, stage: str, fraction: float) -> None:
        self.background.append((stage, fraction, time.monotonic()))
        self.on_background(stage)

    def model_upgraded(self, info, message: str) -> None:
        self.info, self.message = info, message
        self.upgraded.set()


class Answer:
    """An answer queued on a model thread, and when it started and ended."""

    def __init__(self, thread: ModelThread, max_new_tokens: int = 48) -> None:
        self.heard, self.done = Heard(), threading.Event()
        self.started_at = self.ended_at = 0.0
        ended = self.heard.ended

        def end(outcome) -> None:
            self.ended_at = time.monotonic()
            ended(outcome)
            self.done.set()

        self.heard.ended = end
        request = AnswerRequest(
            (Message("user", "Count to twenty."),),
            "auto",
            LookaheadSettings(),
            SamplingSettings(max_new_tokens=max_new_tokens),
        )
        self.submitted_at = time.monotonic()
        thread.answer(request, self.heard)


def test_a_first_load_answers_at_once_and_auto_measures_between_answers(tiny_model_folder, app_paths, tmp_path) -> None:
    """The window's first start: the model is ready without measuring; the background work compiles,
    then measures; an answer that starts meanwhile stops the measurement within 0.5 s, which goes on
    after it; the faster step then answers, and the next start reads the calibration."""
    events, answers = Events(), []
    thread = ModelThread(app_paths, events)

    def answer_while_measuring(stage: str) -> None:
        if stage == MEASURING and not answers:
            answers.append(Answer(thread))

    events.on_background = answer_while_measuring
    source, options = ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu", dtype="fp32")
    try:
        thread.load(source, options)
        assert events.loaded.wait(60) and not isinstance(events.info, str), events.info
        assert events.info.auto_reason == MEASURING_REASON  # ready without measuring
        assert events.progress[-1][0] == "Model ready"
        first = Answer(thread)  # at once, on the eager plain step
        assert first.done.wait(30) and first.heard.outcomes[0].failure is None and first.heard.text
        background = thread.background
        assert background is not None
        assert events.upgraded.wait(300), events.background[-3:]
    finally:
        assert thread.shutdown(10)
    (during,) = answers
    assert during.done.is_set() and during.heard.outcomes[0].failure is None
    wait = next(when for when in background.gate.waited_at if when >= during.submitted_at)
    assert wait - during.submitted_at < 0.5  # the measurement stopped at once
    measured = [when for stage, _, when in events.background if stage == MEASURING]
    assert not [when for when in measured if wait < when < during.ended_at]  # and waited for the answer
    assert measured[-1] > during.ended_at  # then went on
    assert thread.background is None and events.info.auto_reason.startswith("Auto: ")
    assert events.info.auto_reason != MEASURING_REASON and events.message
    # a new data folder on the same machine (the same cache) reads the calibration: nothing runs in the background
    fresh = AppPaths(
        tmp_path / "new-home" / "config", tmp_path / "new-home" / "data", app_paths.cache_dir, app_paths.calibration
    )
    history = HistoryStore.in_folder(fresh.ensure().data_dir)  # and the saved chats' answers seed its memory
    chat = history.create_conversation("earlier")
    history.add_message(chat.id, "user", "Name a fox.")
    history.add_message(chat.id, "assistant", "The quick brown fox jumps over the lazy dog.")
    again = ModelThread(fresh)
    try:
        again.load(source, options)
        deadline = time.monotonic() + 60
        while again.model_name is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert again.model_name is not None and again.background is None
        ready = again._ready  # set before the model's name; its memory filled on the model thread right after
        while ready is not None and len(ready.memory) < 9 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready is not None and len(ready.memory) >= 9
        # the conversations' pools stay with the same model, loaded again (other options), not with another one
        pools = again.pools
        pools.pool_for("earlier", 3, 2).add([1, 2, 3])
        _load_and_wait(again, source, LoadOptions(device="cpu", dtype="bf16"))
        assert again.pools is pools
        other = tmp_path / "other-model"
        shutil.copytree(tiny_model_folder, other)
        _load_and_wait(again, ModelSource("folder", str(other)), options)
        assert again.pools is not pools and len(again.pools.pool_for("earlier", 3, 2)) == 0
    finally:
        assert again.shutdown(10)
        history.close()


def test_an_answer_starts_before_compiling_ends_and_nothing_is_left_running(
    tiny_loaded, app_paths, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing compiled yet
    events = Events()
    background = BackgroundCalibration(tiny_loaded, app_paths, compile_delay_s=300)  # a very slow compile
    ready = ReadyModel(tiny_loaded, make_ready(tiny_loaded, app_paths, background=True).auto, _pools(), background)
    thread = ModelThread(app_paths, events, ready)
    try:
        deadline = time.monotonic() + 60
        while not background.children and time.monotonic() < deadline:
            time.sleep(0.02)
        children = list(background.children)
        assert children and any(stage == COMPILING for stage, *_ in events.background)
        answer = Answer(thread)
        assert answer.done.wait(30) and answer.heard.outcomes[0].failure is None and answer.heard.text
        assert all(child.poll() is None for child in children)  # the answer came while compiling went on
    finally:
        start = time.monotonic()
        assert thread.shutdown(10)
    assert time.monotonic() - start < 5 and not background.running
    for child in children:  # each child and its process group (its compiler) are gone
        assert child.poll() is not None
        try:
            os.killpg(child.pid, 0)
            raise AssertionError(f"compiling child {child.pid} left running")
        except ProcessLookupError:
            pass
    assert not list((tmp_path / "inductor").rglob("*.pt2"))  # no half package
    assert ready.auto.reason == MEASURING_REASON and not events.upgraded.is_set()


def _load_and_wait(thread: ModelThread, source: ModelSource, options: LoadOptions) -> None:
    """Load on ``thread`` and wait until the new model is in place."""
    before = thread._ready
    thread.load(source, options)
    deadline = time.monotonic() + 60
    while (thread._ready is None or thread._ready is before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert thread._ready is not None and thread._ready is not before and thread._ready.loaded.source == source


def _pools():
    from core.chat.pools import ConversationPools

    return ConversationPools()
