"""Compare mode logic: alternation, streaming events, cancel, summary (median and spread), export, storage."""

from __future__ import annotations

import csv
import io
import json

import pytest

from core.bench.report import Row
from core.chat.answer import Answer
from core.chat.prompt import Message
from core.compare import (
    LOOKAHEAD,
    PLAIN,
    CompareRequest,
    Comparison,
    ComparisonRun,
    RunDone,
    RunRecord,
    RunStarted,
    RunStep,
    Spread,
    run_order,
    summarize,
)
from core.compare.export import comparison_csv, comparison_json, export_csv, export_json
from core.compare.store import UNFILED, ComparisonStore
from core.compare.suites import suite_lines
from core.compare.summary import first_difference_of
from core.lookahead import LookaheadConfig
from core.progress import CancelToken
from core.settings import SamplingSettings

CONFIG = LookaheadConfig(window=3, ngram=3, guesses=3)


def request(**overrides) -> CompareRequest:
    values = dict(
        prompt="Count: 1 2 3 4 5 6 7 8 9 10 11 12",
        system_prompt="You are a helpful assistant.",
        lookahead=CONFIG,
        max_new_tokens=12,
        repeats=3,
        conversation_id="42",
    )
    values.update(overrides)
    return CompareRequest(**values)


def record(mode: str, repeat: int, seconds: list[float], tokens: list[int], ids: list[int] | None = None) -> RunRecord:
    ids = ids if ids is not None else list(range(sum(tokens)))
    return RunRecord(mode, repeat, 0, ids, "text", "length", seconds, tokens)


def comparison(runs: list[RunRecord]) -> Comparison:
    return Comparison(
        "abc",
        "2025-01-02T03:04:05",
        "prompt",
        "sys",
        "tiny",
        "CPU",
        "float32",
        CONFIG.label,
        8,
        2,
        conversation_id="7",
        runs=runs,
    )


def test_order_alternates_between_repeats():
    assert run_order(0) == (PLAIN, LOOKAHEAD)
    assert run_order(1) == (LOOKAHEAD, PLAIN)
    assert run_order(2) == (PLAIN, LOOKAHEAD)


def test_a_run_streams_both_modes_in_alternating_order_with_identical_outputs(tiny_loaded):
    run = ComparisonRun(tiny_loaded, request(), warm_up=True)
    events = list(run)
    started = [(e.repeat, e.mode) for e in events if isinstance(e, RunStarted)]
    assert started == [(0, PLAIN), (0, LOOKAHEAD), (1, LOOKAHEAD), (1, PLAIN), (2, PLAIN), (2, LOOKAHEAD)]
    result = run.result()
    assert not result.cancelled and len(result.runs) == 6
    assert [r.position for r in result.runs] == [0, 1, 0, 1, 0, 1]
    for done in (e for e in events if isinstance(e, RunDone)):
        steps = [
            e for e in events if isinstance(e, RunStep) and (e.repeat, e.mode) == (done.record.repeat, done.record.mode)
        ]
        assert "".join(e.text for e in steps) == done.record.text
        assert steps[-1].new_tokens == len(done.record.tokens) == sum(done.record.step_tokens)
    summary = summarize(result)
    assert summary is not None and summary.repeats == 3 and summary.identical
    assert result.model == tiny_loaded.name and result.lookahead == "W3 N3 G3"


def test_both_modes_answer_with_the_chats_sampling(tiny_loaded):
    """The comparison's answers are the chat's: its repetition penalty changes them as it changes the chat's."""
    penalty = SamplingSettings(repetition_penalty=3.0)
    messages = [Message("system", request().system_prompt), Message("user", request().prompt)]
    chat = Answer(tiny_loaded, messages, lookahead=None, max_new_tokens=12, sampling=penalty)
    list(chat)
    greedy = ComparisonRun(tiny_loaded, request(repeats=1))
    penalized = ComparisonRun(tiny_loaded, request(repeats=1, sampling=penalty))
    list(greedy), list(penalized)
    assert [r.tokens for r in penalized.result().runs] == [chat.token_ids, chat.token_ids]  # plain, then lookahead
    assert greedy.result().runs[0].tokens != chat.token_ids  # the penalty made a difference to see


def test_cancel_stops_within_one_step_and_keeps_finished_runs(tiny_loaded):
    cancel = CancelToken()
    run = ComparisonRun(tiny_loaded, request(max_new_tokens=40), cancel)
    seen = 0
    for event in run:
        if isinstance(event, RunStep) and event.mode == LOOKAHEAD:
            seen += 1
            cancel.cancel()
    assert seen == 1
    result = run.result()
    assert result.cancelled
    assert [r.mode for r in result.runs] == [PLAIN]
    assert summarize(result) is None


def test_spread_is_median_and_range():
    spread = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (spread.median, spread.low, spread.high, spread.count) == (2.5, 1.0, 10.0, 4)
    assert spread.relative == pytest.approx(9.0 / 2.5)
    with pytest.raises(ValueError):
        Spread.of([])


def test_summary_takes_medians_over_repeats_and_speedup_per_repeat():
    runs = [
        record(PLAIN, 0, [0.1, 0.1, 0.1, 0.1], [1, 1, 1, 1]),  # 10 tok/s
        record(LOOKAHEAD, 0, [0.1, 0.1], [1, 3]),  # 20 tok/s, 2x
        record(PLAIN, 1, [0.2, 0.2, 0.2, 0.2], [1, 1, 1, 1]),  # 5 tok/s
        record(LOOKAHEAD, 1, [0.2, 0.05], [1, 3]),  # 16 tok/s, 3.2x
        record(PLAIN, 2, [0.1, 0.1], [1, 1]),  # no pair: ignored
    ]
    summary = summarize(comparison(runs))
    assert summary.repeats == 2
    assert summary.plain.tokens_per_second == Spread(7.5, 5.0, 10.0, 2)
    assert summary.lookahead.tokens_per_second.median == pytest.approx(18.0)
    assert summary.speedup.median == pytest.approx(2.6) and summary.speedup.low == pytest.approx(2.0)
    assert summary.plain.time_to_first_token.median == pytest.approx(0.15)
    assert summary.lookahead.tokens_per_step == 2.0 and summary.lookahead.steps == 2 and summary.plain.steps == 4
    assert summary.identical and summary.first_difference is None


def test_a_difference_is_reported_with_its_position():
    runs = [record(PLAIN, 0, [0.1, 0.1], [1, 1], [5, 6]), record(LOOKAHEAD, 0, [0.1], [2], [5, 7])]
    summary = summarize(comparison(runs))
    assert not summary.identical and summary.first_difference == 1
    assert first_difference_of([1, 2], [1, 2, 3]) == 2
    assert first_difference_of([1, 2], [1, 2]) is None


def test_json_export_holds_per_step_timings_of_both_runs_and_round_trips(tmp_path):
    runs = [record(PLAIN, 0, [0.5, 0.25], [1, 1]), record(LOOKAHEAD, 0, [0.5, 0.125], [1, 3])]
    path = tmp_path / "out" / "cmp.json"
    export_json(comparison(runs), path)
    data = json.loads(path.read_text())
    by_mode = {r["mode"]: r for r in data["runs"]}
    assert by_mode[PLAIN]["step_seconds"] == [0.5, 0.25] and by_mode[LOOKAHEAD]["step_tokens"] == [1, 3]
    assert by_mode[LOOKAHEAD]["accepted_histogram"] == {"3": 1}
    assert data["summary"]["identical"] is False  # 2 tokens vs 4
    assert data["summary"]["speedup"]["median"] == pytest.approx((4 / 0.625) / (2 / 0.75))
    assert Comparison.from_json(data) == comparison(runs)
    assert comparison_json(comparison([]))["summary"] is None


def test_csv_export_has_one_row_per_step(tmp_path):
    runs = [record(PLAIN, 0, [0.5, 0.25], [1, 1]), record(LOOKAHEAD, 0, [0.5, 0.125], [1, 3])]
    export_csv(comparison(runs), tmp_path / "cmp.csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "cmp.csv").read_text())))
    assert len(rows) == 4
    assert rows[-1] == {
        "comparison": "abc",
        "repeat": "0",
        "mode": LOOKAHEAD,
        "position": "0",
        "step": "1",
        "tokens": "3",
        "seconds": "0.125000",
        "elapsed_seconds": "0.625000",
        "total_tokens": "4",
    }
    assert comparison_csv(comparison([])).strip() == ",".join(
        csv.DictReader(io.StringIO(comparison_csv(comparison([])))).fieldnames
    )


def test_store_keeps_comparisons_per_conversation(app_paths):
    store = ComparisonStore(app_paths.data_dir)
    first = comparison([record(PLAIN, 0, [0.1], [1]), record(LOOKAHEAD, 0, [0.1], [1])])
    later = comparison([])
    later.id, later.created = "def", "2025-01-02T04:00:00"
    path = store.save(first)
    store.save(later)
    assert path.parent == app_paths.data_dir / "comparisons" / "7"
    listed = store.list("7")
    assert [e.path.name for e in listed] == ["20250102040000-def.json", "20250102030405-abc.json"]
    assert listed[0].speedup is None and listed[1].speedup == pytest.approx(1.0) and listed[1].identical
    assert "1.00x" in listed[1].title and "prompt" in listed[1].title
    assert store.load(path) == first
    assert store.list("8") == []
    (path.parent / "broken.json").write_text("{not json")
    assert len(store.list("7")) == 2
    with pytest.raises(ValueError, match="broken.json"):
        store.load(path.parent / "broken.json")
    assert store.folder(None).name == UNFILED and store.folder("../x").parent == store.root
    store.delete_conversation("7")
    assert store.list("7") == []


def test_suite_lines_pair_plain_and_lookahead_rows():
    rows = [
        Row("code", "plain loop", 2, 100, 10.0, 100, 2, 1.1, 1.0),
        Row("code", "lookahead W3 N3 G3", 2, 100, 5.0, 40, 2, 2.2, 2.0),
        Row("chat", "plain loop", 2, 100, 10.0, 100, 2, 1.1, 1.0),
    ]
    (line,) = suite_lines(rows)
    assert (line.suite, line.plain_tokens_per_second, line.lookahead_tokens_per_second) == ("code", 10.0, 20.0)
    assert (line.speedup, line.tokens_per_step, line.identical, line.runs) == (2.0, 2.5, 2, 2)


def test_suites_run_plain_and_lookahead_with_progress(tiny_loaded):
    from core.compare.suites import run_suites

    reports: list[float] = []
    rows = run_suites(
        tiny_loaded, CONFIG, 6, suites=("code", "math"), limit=1, progress=lambda _s, f: reports.append(f)
    )
    lines = suite_lines(rows)
    assert [line.suite for line in lines] == ["code", "math"]
    assert all(line.identical == line.runs == 1 and line.speedup for line in lines)
    assert reports[-1] == 1.0
