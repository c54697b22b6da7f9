"""``lookahead-chat --self-test``: the installation works (the default model loads, plain equals lookahead)."""

from __future__ import annotations

import time

from app.cli.output import error_message, progress_printer
from core.lookahead import Decoding, LookaheadConfig
from core.models import LoadOptions, ModelSource, load_model
from core.paths import AppPaths


def run(paths: AppPaths) -> int:
    """Load the default model, generate 16 tokens plain and lookahead, check they agree (one line on failure)."""
    try:
        return _self_test(paths)
    except Exception as err:
        print(f"self-test FAILED: {error_message(err, 'The self-test')}")
        return 1


def _self_test(paths: AppPaths) -> int:
    start = time.perf_counter()
    loaded = load_model(ModelSource(), LoadOptions(dtype="fp32"), paths.ensure(), progress_printer("self-test: "))
    ids = loaded.tokenizer("def fibonacci(n):\n    ")["input_ids"]
    plain = Decoding(loaded.prepared, ids, max_new_tokens=16)
    lookahead = Decoding(loaded.prepared, ids, lookahead=LookaheadConfig(4, 4, 4), max_new_tokens=16)
    list(plain), list(lookahead)
    same = plain.tokens == lookahead.tokens and len(plain.tokens) == 16
    verdict = "passed" if same else "FAILED (plain and lookahead differ)"
    print(
        f"self-test {verdict}: {loaded.name} on {loaded.device_info.label}, 16 tokens, "
        f"{lookahead.stats.tokens_per_step:.2f} tokens/step, {time.perf_counter() - start:.1f} s"
    )
    return 0 if same else 1
