"""The main window end to end with the tiny model: stream, stop, regenerate, sampling (edits: test_chat_branches)."""

from __future__ import annotations


def test_send_streams_the_answer_and_saves_it(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=40)
    window = open_window()
    deltas: list[str] = []
    window.worker.answers.delta.connect(lambda _job, text, _figures: deltas.append(text))
    ui.send(window, "Hello there")
    assert len(deltas) >= 1
    user, answer = ui.stored(window)
    assert (user.role, user.content) == ("user", "Hello there")
    assert answer.role == "assistant" and answer.status == "truncated"  # the tiny model runs to its token limit
    assert answer.content and answer.content == window.chat_view.messages[-1].text
    assert answer.stats["new_tokens"] > 0 and answer.stats["tokens_per_second"] > 0
    assert "tok/s" in window.chat_view.messages[-1].figures.text()
    assert "tok/s" in window.figures.rate.text()
    assert window.history.ids() == [window.chat.current_id]


def test_stop_ends_the_answer_within_a_step(tiny_settings, open_window, ui) -> None:
    tiny_settings(max_new_tokens=600)
    window = open_window()
    ui.send(window, "Tell me a long story", wait=False)
    ui.wait_text(window)
    assert window.composer.button.text() == "Stop"
    window.composer.button.click()
    ui.wait_idle(window)  # how fast: tests/app/probe_responsiveness.py measures it on a real model
    answer = ui.stored(window)[-1]
    assert answer.status == "stopped"
    assert 0 < answer.stats["new_tokens"] < 600
    assert window.chat_view.messages[-1].status.text() == "stopped"


def test_regenerate_keeps_the_old_answer_as_a_branch(tiny_settings, open_window, ui) -> None:
    tiny_settings()
    window = open_window()
    ui.send(window, "Hi")
    first = ui.stored(window)[-1]
    assert window.chat_view.messages[-1].regenerate_button.isVisibleTo(window)
    window.chat_view.messages[-1].regenerate_button.click()
    assert window.chat.busy
    assert not window.chat_view.messages[-1].regenerate_button.isVisibleTo(window)
    ui.wait_idle(window)
    messages = ui.stored(window)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].id != first.id and messages[-1].status == "truncated"
    assert len(window.chat_view.messages) == 2
    assert window.chat_view.messages[-1].branch_label.text() == "2/2"
    window.chat_view.messages[-1].previous_button.click()
    assert ui.stored(window)[-1].id == first.id
    assert window.chat_view.messages[-1].text == first.content
    assert window.chat_view.messages[-1].branch_label.text() == "1/2"


def test_sampling_settings_reach_the_answer(tiny_settings, open_window, ui) -> None:
    from dataclasses import replace

    from core.settings import SamplingSettings

    tiny_settings(sampling=SamplingSettings(temperature=1.0, top_k=50, seed=1, max_new_tokens=20), mode="lookahead")
    window = open_window()
    texts = []
    for seed in (1, 1, 2):
        window.settings.update(sampling=replace(window.settings.current.sampling, seed=seed))
        window.new_chat()
        ui.send(window, "Pick some words")
        texts.append(ui.stored(window)[-1].content)
    assert texts[0] == texts[1]  # the seed makes sampling repeatable
    assert texts[0] != texts[2]


def test_a_regenerated_answer_that_comes_out_the_same_says_why(tiny_settings, open_window, ui) -> None:
    from dataclasses import replace

    tiny_settings()  # greedy, as the Precise preset
    window = open_window()
    greedy = window.settings.current.sampling
    cases = [
        (greedy, "temperature 0"),
        (replace(greedy, temperature=0.8, seed=7), "seed"),  # a fixed seed repeats the sampled answer
        (replace(greedy, temperature=0.8), None),  # sampling: another answer, nothing to explain
    ]
    for sampling, why in cases:
        window.settings.update(sampling=sampling)
        window.new_chat()
        ui.send(window, "Hi")
        first = window.chat_view.messages[-1].text
        window.chat.regenerate()
        ui.wait_idle(window)
        answer = window.chat_view.messages[-1]
        assert answer.branch_label.text() == "2/2"
        if why is None:
            assert answer.text != first and not answer.note.isVisibleTo(window)
        else:
            assert answer.text == first and answer.note.isVisibleTo(window)
            assert "same answer" in answer.note.text() and why in answer.note.text(), answer.note.text()


def test_an_answer_sent_while_the_model_loads_says_it_waits_until_it_starts(tiny_settings, open_window, ui) -> None:
    from PySide6.QtCore import Qt

    tiny_settings()
    window = open_window(wait_for_model=False)
    assert window.model is None
    ui.send(window, "Hi", wait=False)  # queued behind the load (and Auto's measurement)
    answer = window.chat_view.messages[-1]
    seen: list[tuple[str, str, str]] = []  # (what happened, the answer's status, the status bar's state)

    def record(event: str) -> None:
        seen.append((event, answer.status.text(), window.figures.state.text()))

    queued = Qt.ConnectionType.QueuedConnection  # after the window's own handlers of the same reports
    window.worker.loads.load_progress.connect(lambda stage, _fraction: record(stage), queued)
    window.worker.answers.started.connect(lambda *_: record("started"), queued)
    record("sent")
    ui.wait_idle(window)
    started = [event for event, _, _ in seen].index("started")
    assert started >= 2, seen  # load reports came while the answer waited
    assert all(
        status == "waiting for the model…" and state == "waiting for the model" for _, status, state in seen[:started]
    ), seen
    assert seen[started][1] == "generating…" and seen[started][2] == "generating", seen
