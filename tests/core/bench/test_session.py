"""The bench session on its own (the CLI only parses and prints it): variants, Auto's calibration, the methods
side by side on the same prompts, and the report."""

from __future__ import annotations

import json

from core.bench.session import BenchOptions, BenchSession
from core.lookahead import LookaheadConfig
from core.suites import BenchPrompt, Suite


def test_a_session_calibrates_auto_and_every_method_answers_as_the_plain_loop(tiny_loaded) -> None:
    options = BenchOptions(max_new_tokens=24, fixed=(LookaheadConfig(4, 3, 4),), dtypes=("fp32",), peers=False)
    session = BenchSession(tiny_loaded, options)
    session.calibrate()
    assert session.calibration is not None and "calibration" in session.calibration_line()
    assert session.variants_line().startswith("weight layouts: fp32 ")
    suite = Suite("code", "", (BenchPrompt(("Write a Python function that adds two numbers.", "Now subtract them.")),))
    report = session.run([suite])
    methods = {row.method for row in report.rows}
    assert methods == {"plain loop", "auto", "lookahead W4 N3 G4"}, methods
    for row in report.rows:  # greedy: every method's answers are the plain loop's, token for token
        assert row.runs == 2 and row.same_as_plain == 2 and row.new_tokens > 0
    saved = json.loads(json.dumps(report.as_json()))
    assert saved["meta"]["methods"] == [m.name for m in session.methods] and saved["meta"]["suites"] == ["code"]
