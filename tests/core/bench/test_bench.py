"""The benchmark runner, report and command, on the tiny model (real decoding, real files)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from app.cli import main
from core.bench.report import markdown_table, summarize
from core.bench.runner import BenchRunner, Method, standard_methods
from core.lookahead import LookaheadConfig
from core.progress import CancelToken
from core.suites import DEFAULT_SUITES, available_suites, load_suite


def test_shipped_suites_have_enough_prompts() -> None:
    names = available_suites()
    for name in (*DEFAULT_SUITES, "multiturn"):
        assert name in names
        assert len(load_suite(name).prompts) >= 10
    assert all(len(p.turns) >= 2 for p in load_suite("multiturn").prompts)


def test_runner_compares_methods_on_identical_prompts(tiny_loaded) -> None:
    config = LookaheadConfig(4, 4, 4)
    methods = standard_methods([("lookahead W4 N4 G4", config)])
    methods.append(Method("lookahead conversation pool", "loop", config, pool="conversation"))
    suites = [load_suite("code", 2), load_suite("multiturn", 1)]
    runner = BenchRunner(tiny_loaded, max_new_tokens=12)
    results = runner.run(suites, methods)
    assert runner.memory is not None and 2 * 12 < len(runner.memory) <= 5 * 12  # each turn's reference answer
    assert BenchRunner(tiny_loaded, memory=False).memory is None
    assert not tiny_loaded.model._forward_pre_hooks  # forward passes were counted, and the counter removed
    assert len(results) == len(methods) * (2 + 3)
    for r in results:
        if r.method.startswith(("lookahead", "plain", "generate")):
            assert r.identical and r.same_as_plain, r  # fp32: every method answers as plain decoding does
        assert r.new_tokens > 0 and r.seconds > 0
        if r.method == "generate":
            assert r.steps == r.new_tokens and r.plain  # forward passes, counted
    rows = summarize(results)
    by = {(r.suite, r.method): r for r in rows}
    assert by[("code", "generate")].speedup == 1.0
    assert by[("code", "plain loop")].speedup_vs_loop == 1.0
    fastest = by[("code", "generate")].fastest_plain
    assert fastest in ("generate", "plain loop") and by[("code", fastest)].speedup_vs_fastest_plain == 1.0
    assert all(r.speedup_vs_fastest_plain <= 1.0 for r in rows if r.method in ("generate", "plain loop"))
    assert by[("code", "lookahead W4 N4 G4")].tokens_per_step >= 1.0
    table = markdown_table(rows, "tiny")
    assert "| code | lookahead W4 N4 G4 |" in table and "| multiturn | lookahead conversation pool |" in table
    assert "Fastest plain decoding per suite: code: " in table
    assert "| identical to generate | identical to plain loop |" in table
    lookahead = by[("code", "lookahead W4 N4 G4")]
    assert f"| {lookahead.tokens_per_step:.2f} | 2/2 | 2/2 | {lookahead.new_tokens} |" in table
    unmatched = markdown_table([dataclasses.replace(lookahead, same_as_plain=None)])  # no plain loop in its dtype
    assert f"| 2/2 | - | {lookahead.new_tokens} |" in unmatched


def test_runner_runs_each_dtype_and_auto_with_the_chat_repetition_penalty(tiny_loaded) -> None:
    from core.autotune.calibration import calibrate_dtypes
    from core.autotune.chooser import AutoChooser
    from core.runtime.prepared import PreparedModel
    from core.runtime.weights.variants import bf16_copy

    models = {"fp32": tiny_loaded.prepared, "bf16": PreparedModel(bf16_copy(tiny_loaded.model))}
    runner = BenchRunner(tiny_loaded, max_new_tokens=10, repetition_penalty=1.1, models=models)
    assert set(runner.models) == {"fp32", "bf16"}
    runner.chooser = AutoChooser(calibrate_dtypes(runner.models))
    methods = [
        Method("plain loop [fp32]", "loop", dtype="fp32"),
        Method("plain loop [bf16]", "loop", dtype="bf16"),
        Method("generate [bf16]", "generate", dtype="bf16"),
        Method("auto", "auto"),
        Method("prompt lookup", "prompt_lookup"),
    ]
    runner.warm_up(methods)
    results = runner.run([load_suite("chat", 2)], methods)
    assert all(r.identical for r in results if not r.method.startswith("prompt")), results
    assert all(r.same_as_plain is not None for r in results)  # each dtype has its plain loop here
    auto = [r for r in results if r.method == "auto"]
    assert all(sum(r.settings.values()) == r.new_tokens - 1 for r in auto)
    lookup = [r for r in results if r.method == "prompt lookup"]
    assert all(1 <= r.steps <= r.new_tokens for r in lookup)
    rows = summarize(results, "generate [bf16]", "plain loop [fp32]")
    assert {r.fastest_plain for r in rows} <= {"plain loop [fp32]", "plain loop [bf16]", "generate [bf16]"}


def test_auto_runs_on_the_model_variant_its_calibration_chose(tiny_loaded) -> None:
    from core.autotune.calibration import calibrate_dtypes
    from core.autotune.chooser import AutoChooser
    from core.runtime.prepared import PreparedModel
    from core.runtime.weights.variants import int8_copy

    int8 = int8_copy(tiny_loaded.model)
    runner = BenchRunner(
        tiny_loaded, max_new_tokens=6, models={"fp32": tiny_loaded.prepared, "int8": PreparedModel(int8)}
    )
    assert set(runner.models) == {"fp32", "int8"}
    calibration = calibrate_dtypes(runner.models)
    calibration.quantization = "8bit"  # as when int8 weights measure clearly faster
    assert calibration.variant == "int8"
    runner.chooser = AutoChooser(calibration)
    forwards: list[int] = []
    hook = int8.get_input_embeddings().register_forward_hook(lambda *args: forwards.append(1))
    try:
        results = runner.run([load_suite("chat", 1)], [Method("auto", "auto")])
    finally:
        hook.remove()
    assert results and len(forwards) >= sum(r.steps for r in results)  # every step ran on the int8 model


def test_runner_order_rotates_between_prompts(tiny_loaded) -> None:
    methods = [Method("plain loop", "loop"), Method("lookahead", "loop", LookaheadConfig(3, 3, 3))]
    results = BenchRunner(tiny_loaded, max_new_tokens=4).run([load_suite("chat", 2)], methods)
    first_of_each_prompt = [results[0].method, results[2].method]
    assert first_of_each_prompt == ["plain loop", "lookahead"]


def test_bench_command_writes_table_json_and_png(tiny_model_folder, app_paths, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    out = tmp_path / "out"
    code = main(
        [
            "bench",
            "--model",
            str(tiny_model_folder),
            "--dtype",
            "fp32",
            "--suites",
            "math",
            "--limit",
            "2",
            "--max-new-tokens",
            "8",
            "--configs",
            "auto,3:3:3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "| math | auto |" in printed and "| math | prompt lookup 10 |" in printed
    assert "Auto: " in captured.err and "calibration" in captured.err
    data = json.loads((out / "bench.json").read_text())
    assert {row["method"] for row in data["summary"]} >= {"generate", "plain loop", "auto", "lookahead W3 N3 G3"}
    assert data["meta"]["calibration"]["curve"]["sizes"][0] == 1
    assert all(run["identical"] for run in data["runs"] if not run["method"].startswith("prompt"))
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_runs_without_prompt_pool(tiny_model_folder, app_paths, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    code = main(
        [
            "bench",
            "--model",
            str(tiny_model_folder),
            "--dtype",
            "fp32",
            "--suites",
            "heldout-code",
            "--limit",
            "1",
            "--max-new-tokens",
            "8",
            "--configs",
            "3:3:3",
            "--prompt-pool",
            "both",
            "--no-peers",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| heldout-code | lookahead W3 N3 G3 |" in printed
    assert "| heldout-code | lookahead W3 N3 G3 no prompt pool |" in printed


def test_bench_rejects_a_bad_config_before_loading(app_paths, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    assert main(["bench", "--model", str(tmp_path / "no-such-model"), "--configs", "7:1:7"]) == 1
    assert "bad --configs entry '7:1:7'" in capsys.readouterr().err
    assert main(["bench", "--model", str(tmp_path / "no-such-model"), "--configs", "7:5"]) == 1
    assert "three numbers are needed" in capsys.readouterr().err


@pytest.mark.parametrize("stop_at", [20, 100])  # inside generate's reference answer; inside the plain loop
def test_runner_stops_within_one_step_when_cancelled(tiny_loaded, stop_at: int) -> None:
    cancel = CancelToken()
    forwards = 0

    def count_and_cancel(module, args) -> None:
        nonlocal forwards
        forwards += 1
        if forwards == stop_at:
            cancel.cancel()

    methods = standard_methods([("lookahead W3 N3 G3", LookaheadConfig(3, 3, 3))], peers=False)
    hook = tiny_loaded.model.get_input_embeddings().register_forward_pre_hook(count_and_cancel)  # once per forward pass
    try:
        results = BenchRunner(tiny_loaded, max_new_tokens=64).run([load_suite("chat", 3)], methods, cancel=cancel)
    finally:
        hook.remove()
    assert forwards == stop_at  # the step that saw Stop was the last one
    assert results == []  # the answer cut short is not reported as a result
