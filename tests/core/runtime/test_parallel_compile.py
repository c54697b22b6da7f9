"""Compiling several variants' decoding steps side by side, in child processes."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from core.lookahead import Decoding
from core.progress import Cancelled
from core.runtime.compiled import kernels
from core.runtime.compiled.package import compile_job, compile_jobs
from core.runtime.compiled.parallel import compile_in_parallel
from core.runtime.weights.quantized import quantize_model
from tests.conftest import make_model, tiny_llama_config
from tests.core.runtime.test_compiled_step import _eager_calls, _layer_calls, _prompt, compiled


def _paths(models: list) -> list:
    """Everything the models' steps take: each model's 1-token layer and rows layer, or the kernel library
    (the int8 decoder's)."""
    return [job.path for model in models for job in compile_jobs(model)]


def _variants() -> list:
    """A float and an int8 variant of one tiny model, as calibration compiles them."""
    int8 = make_model(tiny_llama_config(96), seed=11)
    quantize_model(int8, 8)
    return [make_model(tiny_llama_config(96), seed=11), int8]


def test_children_compile_the_packages_that_the_models_then_load(tiny_model_folder, app_paths) -> None:
    """The session's tiny model had its variants' packages compiled in children (conftest's
    ``_compile_step_packages``, as the app's first start does): the variants load them and decode compiled."""
    from core.engine.background import variant_makers
    from core.models import LoadOptions, ModelSource, load_model

    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    models = [make() for make in variant_makers(loaded)]
    paths = _paths(models)
    # fp32 and bf16: two layers each; int8: the kernel library alone where the int8 decoder runs
    assert len(set(paths)) == (5 if kernels.supported() else 6) and all(path.is_file() for path in paths)
    stamps = [path.stat().st_mtime_ns for path in paths]
    compile_in_parallel(models)  # every package is there: no child starts
    for model in models:
        prepared = compiled(model)
        decoding = Decoding(prepared, _prompt(3), max_new_tokens=12)
        # the compiled steps ran: eager layers for the prompt at most
        assert _layer_calls(model, lambda decoding=decoding: list(decoding)) == _eager_calls(prepared)
        if model.dtype == torch.float32:  # bf16's compiled layer rounds otherwise than eager's
            eager = Decoding(model, _prompt(3), max_new_tokens=12)
            list(eager)
            assert decoding.tokens == eager.tokens
    assert [path.stat().st_mtime_ns for path in paths] == stamps  # loaded, not compiled again
    assert not list(paths[0].parent.glob("*partial*"))


def test_cancel_stops_the_children_and_leaves_no_package(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    models = _variants()
    with pytest.raises(Cancelled):
        compile_in_parallel(models, cancelled=lambda: True)
    deadline = time.perf_counter() + 6  # the children are compiling by then
    with pytest.raises(Cancelled):
        compile_in_parallel(models, cancelled=lambda: time.perf_counter() > deadline)
    assert not any(path.exists() for path in _paths(models))
    assert not list((tmp_path / "inductor").rglob("*.partial.pt2"))


def test_children_that_fail_are_reported_and_the_models_compile_as_before(tmp_path, monkeypatch, caplog) -> None:
    import torch._inductor.config  # noqa: F401 - reads CXX once, on import: this process keeps its compiler

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    models = _variants()
    packages = len(set(_paths(models)))  # 4, or 3 where the int8 decoder runs every step (the kernel library)
    assert packages == (3 if kernels.supported() else 4)  # this process's compiler is fine
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))  # the children's is not
    with caplog.at_level(logging.WARNING, logger="core.runtime.compiled.parallel"):
        compile_in_parallel(models)
    failures = [r.getMessage() for r in caplog.records if "in a child process failed" in r.getMessage()]
    assert len(failures) == packages and all("C++ compiler" in failure for failure in failures), failures
    assert not any(path.exists() for path in _paths(models))


def test_models_of_the_same_shapes_share_their_packages(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    model, same_shapes = make_model(tiny_llama_config(96), seed=12), make_model(tiny_llama_config(96), seed=13)
    assert _paths([model]) == _paths([same_shapes]) and len(set(_paths([model]))) == 2  # 1-token and rows layers


def test_the_frozen_app_runs_a_child(tmp_path, monkeypatch) -> None:
    """What the frozen app's children run: ``lookahead-chat _compile-step JOB``, through its entry script."""
    from core.runtime.compiled.parallel import CHILD_COMMAND

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    job = compile_job(make_model(tiny_llama_config(96), seed=14), rows=True)
    torch.save(job, tmp_path / "job.pt")
    entry = Path(__file__).resolve().parents[3] / "packaging" / "entry.py"
    child = subprocess.run([sys.executable, str(entry), CHILD_COMMAND, str(tmp_path / "job.pt")], timeout=300)
    assert child.returncode == 0
    assert job.path.is_file()


def test_a_child_whose_parent_is_killed_outright_stops(tmp_path) -> None:
    """Nothing is left running when the app is killed (it cannot stop its children then)."""
    import os
    import signal
    import subprocess
    import sys

    if os.name != "posix":
        pytest.skip("process groups: POSIX")
    parent_code = (
        "import pathlib, sys, time\n"
        "from tests.conftest import make_model, tiny_llama_config\n"
        "from core.runtime.compiled.package import compile_job\n"
        "from core.runtime.compiled.parallel import start_child\n"
        "job = compile_job(make_model(tiny_llama_config(96), seed=14), rows=True)\n"
        "child, _ = start_child(job, pathlib.Path(sys.argv[1]) / 'job', 300)  # waits 300 s, then compiles\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(3)  # the child is up and watching
    os.kill(child, 0)  # alive while its parent is
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the compiling child outlived its killed parent")
