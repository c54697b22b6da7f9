"""The one answer job every front door runs: its plan, pool, label, and what Auto learned, kept."""

from __future__ import annotations

import json

from core.autotune.calibration import Calibration
from core.autotune.chooser import AutoChooser
from core.autotune.curve import StepCostCurve
from core.autotune.predict import grid, predict
from core.autotune.prepare import AutoTuning
from core.autotune.store import CalibrationStore
from core.chat.pools import ConversationPools
from core.chat.prompt import Message
from core.engine.answer_job import AnswerJob, AnswerRequest
from core.engine.ready import ReadyModel
from core.server.answer_events import AnswerDefaults, Delta, Ended, ServerAnswer, Started
from core.server.protocol import parse_chat
from core.settings import LookaheadSettings, SamplingSettings

FLAT = StepCostCurve((1, 2, 4, 8, 16, 32), (0.038, 0.040, 0.040, 0.042, 0.043, 0.048))  # where lookahead pays


class Heard:
    """An answer listener that keeps what it heard."""

    def __init__(self) -> None:
        self.starts, self.text, self.outcomes = [], "", []

    def started(self, start) -> None:
        self.starts.append(start)

    def delta(self, text, figures) -> None:
        self.text += text

    def ended(self, outcome) -> None:
        self.outcomes.append(outcome)


def _measured(loaded, paths) -> ReadyModel:
    """``loaded`` with Auto calibrated on a flat step cost curve (verification pays: it is scored every step)."""
    calibration = Calibration("cpu", "float32", FLAT, predict(FLAT, grid("cpu")), 1.0)
    store = CalibrationStore.of(paths, loaded)
    store.write(calibration)
    return ReadyModel(
        loaded, AutoTuning(calibration.reason, calibration, AutoChooser(calibration), store), ConversationPools()
    )


def _repetitive(turns: int = 6) -> tuple[Message, ...]:
    return (Message("user", " ".join(["one two three four five"] * turns)),)


def test_an_auto_answer_is_labelled_with_what_ran_and_what_auto_learned_is_kept(tiny_loaded, app_paths) -> None:
    ready = _measured(tiny_loaded, app_paths)
    heard = Heard()
    request = AnswerRequest(_repetitive(), "auto", LookaheadSettings(), SamplingSettings(max_new_tokens=160))
    assert AnswerJob(request, heard).steps_job().run(ready) == "finished"
    (start,), (outcome,) = heard.starts, heard.outcomes
    assert start.mode == "auto" and start.prompt_tokens > 10 and outcome.failure is None
    assert outcome.figures.mode.startswith("auto: ") and outcome.text == heard.text and outcome.figures.new_tokens > 30
    learned = json.loads(ready.auto.store.path.read_text())["learned"]  # tokens per step measured over 24 steps or more
    assert learned and set(learned) <= {s.label for s in grid("cpu")}


def test_the_server_saves_what_auto_learned(tiny_loaded, app_paths) -> None:
    """The server's answers go through the same job: Auto's figures are kept as the window's are."""
    ready = _measured(tiny_loaded, app_paths)
    body = {
        "model": tiny_loaded.name,
        "messages": [{"role": "user", "content": _repetitive()[0].content}],
        "max_tokens": 160,
        "temperature": 0,
    }
    events: list = []
    answer = ServerAnswer(
        parse_chat(body, 256), AnswerDefaults("auto", LookaheadSettings(), SamplingSettings()), 256, events.append
    )
    assert answer.job().run(ready) == "finished"
    assert isinstance(events[0], Started) and events[0].mode == "auto" and isinstance(events[-1], Ended)
    assert events[-1].outcome == "finished" and events[-1].lookahead["mode"].startswith("auto: ")
    assert "".join(e.text for e in events if isinstance(e, Delta))
    assert json.loads(ready.auto.store.path.read_text())["learned"]


def test_a_conversation_keeps_its_pool_across_answers_and_a_request_without_one_gets_its_own(tiny_ready) -> None:
    lookahead = LookaheadSettings(auto=False, window=3, ngram=3, guesses=3)
    for conversation in (7, 7, None):
        request = AnswerRequest(
            _repetitive(2), "lookahead", lookahead, SamplingSettings(max_new_tokens=8), conversation
        )
        AnswerJob(request, Heard()).steps_job().run(tiny_ready)
    pool = tiny_ready.pools.pool_for(7, 3, 3)
    assert len(pool) > 0 and tiny_ready.pools.pool_for(None, 3, 3) is not pool


def test_a_prompt_that_does_not_fit_is_rejected_before_any_step(tiny_ready) -> None:
    heard = Heard()
    too_long = SamplingSettings(max_new_tokens=tiny_ready.loaded.context_length)  # no room left for the prompt
    assert (
        AnswerJob(AnswerRequest(_repetitive(), "plain", LookaheadSettings(), too_long), heard)
        .steps_job()
        .run(tiny_ready)
        == "errored"
    )
    (outcome,) = heard.outcomes
    assert heard.starts == [] and outcome.rejected and outcome.finish_reason == "error" and outcome.figures is None
    assert "max new tokens" in outcome.error


def test_a_raw_prompt_is_continued_without_the_chat_template(tiny_ready) -> None:
    heard = Heard()
    request = AnswerRequest("def add(a, b):", "plain", LookaheadSettings(), SamplingSettings(max_new_tokens=6))
    AnswerJob(request, heard).steps_job().run(tiny_ready)
    assert heard.starts[0].prompt_tokens == len(tiny_ready.loaded.tokenizer("def add(a, b):")["input_ids"])


def test_every_answer_joins_the_models_memory_for_later_conversations(tiny_ready) -> None:
    """Plain or lookahead, each answer's tokens are remembered: a later conversation's guesses read them."""
    lookahead = LookaheadSettings(auto=False, window=0, ngram=4, guesses=1)
    for mode, conversation in (("plain", 1), ("lookahead", 2)):
        request = AnswerRequest(_repetitive(2), mode, lookahead, SamplingSettings(max_new_tokens=8), conversation)
        assert AnswerJob(request, Heard()).steps_job().run(tiny_ready) == "finished"
        assert len(tiny_ready.memory) == 8 * conversation
