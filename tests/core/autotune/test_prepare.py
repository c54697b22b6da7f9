"""Auto's calibration of a loaded model: measured once, cached per machine set-up, dtype by measurement."""

from __future__ import annotations

import json

import pytest
import torch

from core.autotune import prepare as cal
from core.autotune.store import CalibrationStore
from core.models import LoadOptions, ModelSource, load_model
from core.progress import CancelToken
from core.runtime.compiled import kernels
from core.runtime.weights.packed import layout_of


def _path(paths, loaded):
    return CalibrationStore.of(paths, loaded).path


def _fail_if_measuring(stage: str, fraction: float) -> None:
    assert stage != cal.STAGE, "measured again"  # compiling a step recorded as compiled is not measuring


def test_calibration_is_measured_once_then_read_from_the_cache(tiny_loaded, app_paths) -> None:
    stages: list[float] = []
    first = cal.ensure_calibrated(tiny_loaded, app_paths, lambda stage, f: stages.append(f))
    path = _path(app_paths, tiny_loaded)
    assert first.calibration is not None and path.is_file() and stages[-1] == 1.0
    assert first.chooser is not None and first.chooser.calibration is first.calibration
    stored = json.loads(path.read_text())
    assert stored["key"]["threads"] == torch.get_num_threads() and stored["key"]["torch"] == torch.__version__
    assert stored["key"]["step"] == "lean"  # the tiny LLaMA runs on the lean step, and its curve is that step's
    named: list[str] = []
    second = cal.ensure_calibrated(tiny_loaded, app_paths, lambda stage, f: named.append(stage))
    assert (
        cal.STAGE not in named and second.calibration.curve == first.calibration.curve
    )  # from the cache: nothing measured (at most compiled)


def test_any_change_of_the_key_measures_again(tiny_loaded, app_paths) -> None:
    before = _path(app_paths, tiny_loaded)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)
        assert _path(app_paths, tiny_loaded) != before
    finally:
        torch.set_num_threads(threads)
    tiny_loaded.requested_quantization = "4bit"
    assert _path(app_paths, tiny_loaded) != before


def test_cpu_dtype_auto_keeps_the_dtype_whose_plain_step_is_faster(tiny_model_folder, app_paths) -> None:
    options = LoadOptions(device="cpu", quantization="none")
    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    assert loaded.dtype == torch.float32 and loaded.requested_dtype == "auto"
    fractions: list[float] = []
    calibration = cal.ensure_calibrated(
        loaded, app_paths, lambda stage, f: fractions.append(f) if stage == cal.STAGE else None
    ).calibration
    assert (
        fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    )  # the bar moves on, never back
    assert len(set(fractions)) > 5
    assert set(calibration.dtype_seconds) == {"float32", "bfloat16"}
    faster = min(calibration.dtype_seconds, key=calibration.dtype_seconds.get)
    assert str(loaded.dtype) == f"torch.{faster}" == f"torch.{calibration.dtype}"
    assert loaded.model.get_input_embeddings().weight.dtype == loaded.dtype
    # the next start loads fp32 again and converts from the cache, without measuring
    again = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    cal.ensure_calibrated(again, app_paths, _fail_if_measuring)
    assert again.dtype == loaded.dtype
    # the weight layout measured faster is recorded and taken again from the cache
    assert layout_of(again.model) == layout_of(loaded.model) == calibration.layout


def test_cpu_quantization_auto_takes_int8_only_when_clearly_faster(tiny_model_folder, app_paths) -> None:
    from core.runtime.weights.quantized import Int8WeightLinear

    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    assert loaded.requested_quantization == "auto" and loaded.quantization == "none"
    calibration = cal.ensure_calibrated(loaded, app_paths).calibration
    assert set(calibration.dtype_seconds) == {"float32", "bfloat16", "int8"}
    int8_wins = (
        calibration.quantization == "8bit"
    )  # the rule itself: test_auto.py, test_int8_is_kept_only_where_it_speeds_up_auto
    assert int8_wins == (loaded.quantization == "8bit")
    assert isinstance(loaded.model.lm_head, Int8WeightLinear) == int8_wins
    assert ("int8 weights" in calibration.reason) == int8_wins
    again = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    cal.ensure_calibrated(again, app_paths, _fail_if_measuring)
    assert (again.quantization, again.dtype) == (loaded.quantization, loaded.dtype)


def test_copies_that_would_not_fit_in_the_free_memory_are_not_tried(tiny_model_folder, app_paths, monkeypatch) -> None:
    from core.runtime.memory import SystemMemory

    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    needed = {name: int(cal.COPY_MEMORY_MARGIN * cal.variant_bytes(loaded.model, name)) for name in ("bf16", "int8")}
    smaller = min(needed, key=needed.__getitem__)
    monkeypatch.setattr(cal, "system_memory", lambda: SystemMemory(total=10**12, available=needed[smaller]))
    calibration = cal.ensure_calibrated(loaded, app_paths).calibration
    assert set(calibration.dtype_seconds) == {"float32", {"bf16": "bfloat16", "int8": "int8"}[smaller]}
    untried = next(name for name in needed if name != smaller)
    assert f"{untried} not tried (not enough free memory)" in calibration.reason  # the status bar says why
    again = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    assert (
        cal.ensure_calibrated(again, app_paths, _fail_if_measuring).calibration.reason == calibration.reason
    )  # and says it again


def test_a_model_loaded_in_bf16_to_leave_memory_tries_int8_but_never_widens_to_fp32(
    tiny_model_folder, app_paths, monkeypatch
) -> None:
    from core.models import loader
    from core.runtime.memory import SystemMemory

    monkeypatch.setattr(
        loader, "system_memory", lambda: SystemMemory(total=1000, available=1000)
    )  # any model is too big for fp32
    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    assert loaded.dtype == torch.bfloat16 and loaded.quantization == "none"
    calibration = cal.ensure_calibrated(loaded, app_paths).calibration
    assert set(calibration.dtype_seconds) == {"bfloat16", "int8"} and loaded.dtype == torch.bfloat16
    stored = json.loads(_path(app_paths, loaded).read_text())
    stored["calibration"].update(
        dtype="float32", quantization="none"
    )  # as a calibration made with more memory might say
    _path(app_paths, loaded).write_text(json.dumps(stored))
    again = load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu"), app_paths)
    cal.ensure_calibrated(again, app_paths, _fail_if_measuring)
    assert again.dtype == torch.bfloat16 and again.model.get_input_embeddings().weight.dtype == torch.bfloat16


def test_an_explicit_dtype_is_kept(tiny_loaded, app_paths) -> None:
    calibration = cal.ensure_calibrated(tiny_loaded, app_paths).calibration
    assert tiny_loaded.requested_dtype == "fp32" and tiny_loaded.dtype == torch.float32
    assert calibration.dtype_seconds == {}


def test_cancelled_calibration_leaves_auto_plain_and_measures_next_time(tiny_loaded, app_paths) -> None:
    cancel = CancelToken()
    cancel.cancel()
    auto = cal.ensure_calibrated(tiny_loaded, app_paths, cancel=cancel)
    assert auto.calibration is None and auto.chooser is None and "cancelled" in auto.reason
    assert not _path(app_paths, tiny_loaded).exists()


def test_an_unreadable_cache_is_measured_again(tiny_loaded, app_paths) -> None:
    path = _path(app_paths, tiny_loaded)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"calibration": {"curve": {"sizes": [1], "seconds": [-1]}}}')
    assert cal.ensure_calibrated(tiny_loaded, app_paths).calibration is not None
    assert json.loads(path.read_text())["calibration"]["curve"]["seconds"][0] > 0


def test_answers_measurements_are_kept_for_the_next_start(tiny_loaded, app_paths) -> None:
    auto = cal.ensure_calibrated(tiny_loaded, app_paths)
    auto.store.add_learned(auto.calibration, {"W0 N3 G1": (2.5, 1.8)})
    restored = cal.ensure_calibrated(tiny_loaded, app_paths).calibration
    estimate = next(e for e in restored.estimates if e.label == "W0 N3 G1")
    assert (estimate.tokens_per_step, estimate.fed_tokens) == (2.5, 1.8)


def test_a_failing_measurement_leaves_the_model_answering_plainly(tiny_loaded, app_paths) -> None:
    def refuse_wide_steps(module, args):
        if args[0].shape[1] == 32:  # e.g. out of memory for a wide step on a small GPU
            raise RuntimeError("simulated failure of a 32-token step")

    # Every forward pass embeds its tokens once, whichever step implementation runs it.
    handle = tiny_loaded.model.get_input_embeddings().register_forward_pre_hook(refuse_wide_steps)
    try:
        auto = cal.calibrate_or_plain(tiny_loaded, app_paths)
    finally:
        handle.remove()
    assert auto.reason.startswith("Auto: plain (measuring this machine failed: RuntimeError")
    assert auto.chooser is None and not _path(app_paths, tiny_loaded).exists()
    again = cal.calibrate_or_plain(tiny_loaded, app_paths)  # measured at the next load
    assert again.calibration is not None and again.reason == again.calibration.reason


def test_a_compiled_step_in_the_cache_is_compiled_again_at_the_next_start(tiny_model_folder, app_paths) -> None:
    options = LoadOptions(device="cpu", dtype="fp32")
    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    cal.ensure_calibrated(loaded, app_paths)
    path = _path(app_paths, loaded)
    stored = json.loads(path.read_text())
    stored["calibration"].update(layout="plain", compiled=True, compiled_rows=True)  # as where both measured faster
    path.write_text(json.dumps(stored))
    again = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    stages: list[tuple[str, float]] = []
    calibration = cal.ensure_calibrated(again, app_paths, lambda stage, f: stages.append((stage, f))).calibration
    step = again.prepared.compiled
    assert calibration.compiled and step is not None and step.one_token is not None and step.rows is not None
    assert stages == [(cal.COMPILE_STAGE, 0.0), (cal.COMPILE_STAGE, 1.0)] and "compiled steps" in calibration.reason


def test_a_variant_is_compiled_only_if_it_might_overtake_the_fastest() -> None:
    # measured here (2 threads): bf16 eager 22 ms, compiled 11 (gain 2); int8 eager 23; fp32 eager 37
    assert cal.compiling_may_pay(0.022, float("inf"), 1.0)  # the first variant is always tried
    assert cal.compiling_may_pay(0.023, 0.011, 2.0)  # 23 / 2.5 = 9.2 ms: int8 might win
    assert not cal.compiling_may_pay(0.037, 0.011, 2.0)  # 37 / 2.5 = 14.8 ms: fp32 cannot


def test_packed_fp32_weights_keep_a_plain_copy_only_with_the_compiled_step() -> None:
    from core.lookahead import Decoding
    from core.runtime.weights.packed import PACKED, PACKED_ROWS, apply_layout
    from tests.conftest import make_model, tiny_llama_config

    model = make_model(tiny_llama_config(96), seed=5)
    prompt = list(range(3, 40))
    expected = Decoding(model, prompt, max_new_tokens=24)
    list(expected)
    apply_layout(model, PACKED)  # what choose_layout keeps for fp32 here
    variants = cal.prepare_variants({"fp32": model}, None)
    prepared = variants.models["fp32"]
    layout = layout_of(model)
    assert layout in (PACKED, PACKED_ROWS) and (layout == PACKED_ROWS) == (prepared.compiled is not None)
    assert variants.one_token["fp32"] > 0  # the compiled step's cost, where kept (measured choosing it)
    decoded = Decoding(prepared, prompt, max_new_tokens=24)
    list(decoded)
    assert decoded.tokens == expected.tokens  # fp32: compiled or eager, the same answer


def test_packed_weights_join_the_side_by_side_compile_on_their_plain_copy(monkeypatch) -> None:
    from core.runtime.compiled.package import compile_jobs
    from core.runtime.compiled.parallel import compile_in_parallel
    from core.runtime.weights.packed import PACKED, PACKED_ROWS, apply_layout
    from tests.core.runtime.test_parallel_compile import _variants

    fp32, int8 = _variants()  # the session's cache holds their packages (test_parallel_compile compiles them afresh)
    apply_layout(fp32, PACKED)  # what choose_layout keeps for fp32 here (a bigger model's bf16, elsewhere)
    side_by_side: list[set] = []

    def recorded(models, *args) -> None:
        side_by_side.append({job.path for model in models for job in compile_jobs(model)})
        compile_in_parallel(models, *args)

    monkeypatch.setattr(cal, "compile_in_parallel", recorded)
    variants = cal.prepare_variants({"fp32": fp32, "int8": int8}, None)
    # each variant's 1-token and rows layers (int8's kernel library alone where the int8 decoder runs)
    assert len(side_by_side) == 1 and len(side_by_side[0]) == (3 if kernels.supported() else 4)
    compiled = variants.models["fp32"].compiled is not None
    assert layout_of(fp32) == (PACKED_ROWS if compiled else PACKED)  # the copy only with the step


def test_variants_far_slower_than_the_fastest_keep_the_plain_layout_unmeasured(monkeypatch, caplog) -> None:
    import logging

    from core.autotune.layout import choose_layout
    from core.runtime.weights.variants import bf16_copy
    from tests.conftest import make_model, tiny_llama_config

    fp32 = make_model(tiny_llama_config(96, hidden_act="gelu"), seed=5)  # no compiled step: layouts only
    models = {"fp32": fp32, "bf16": bf16_copy(fp32)}
    measured: list[torch.dtype] = []
    monkeypatch.setattr(
        cal, "choose_layout", lambda model, cancelled: measured.append(model.dtype) or choose_layout(model, cancelled)
    )
    monkeypatch.setattr(cal, "LAYOUT_HOPE", 1.0)  # only the fastest variant's layouts are measured up front
    with caplog.at_level(logging.INFO, logger="core.autotune.prepare"):
        cal.prepare_variants(models, None)
    skipped = [name for name in models if f"{name}: no weight layout tried" in caplog.text]
    assert len(skipped) == 1
    fastest = next(name for name in models if name not in skipped)
    assert measured[0] == models[fastest].dtype  # the layouts measured up front were the fastest variant's only


def test_without_its_compiler_a_cached_fp32_step_drops_the_plain_copy(
    tiny_model_folder, app_paths, tmp_path, monkeypatch
) -> None:
    import torch._inductor.config as inductor_config

    from core.runtime.weights.packed import PACKED, PACKED_ROWS

    options = LoadOptions(device="cpu", dtype="fp32")
    loaded = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    cal.ensure_calibrated(loaded, app_paths)
    path = _path(app_paths, loaded)
    stored = json.loads(path.read_text())
    stored["calibration"].update(layout=PACKED_ROWS, compiled=True, compiled_rows=True)  # as where they won
    path.write_text(json.dumps(stored))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # its package gone, and no compiler now
    again = load_model(ModelSource("folder", str(tiny_model_folder)), options, app_paths)
    with inductor_config.patch({"cpp.cxx": (None, str(tmp_path / "no-such-compiler"))}):
        calibration = cal.ensure_calibrated(again, app_paths).calibration
    assert not calibration.compiled and not calibration.compiled_rows and again.prepared.compiled is None
    assert calibration.layout == layout_of(again.model) == PACKED  # fp32's plain copy served only the compiled step
    assert "compiled" not in calibration.reason


def test_packed_weights_get_no_plain_copy_where_the_compiled_step_cannot_run() -> None:
    from core.runtime.weights.packed import PACKED, apply_layout
    from tests.conftest import make_model, tiny_llama_config

    model = make_model(
        tiny_llama_config(96, hidden_act="gelu"), seed=5
    )  # an activation the compiled layer does not have
    apply_layout(model, PACKED)
    head = model.lm_head
    prepared = cal.fastest_step(model)
    assert prepared.compiled is None and layout_of(model) == PACKED
    assert model.lm_head is head  # not repacked with a copy and back: nothing was tried


@pytest.mark.default_model
def test_greedy_lookahead_in_int8_weights_may_answer_otherwise_than_plain(default_loaded) -> None:
    """Why the status line warns (below): on int8 weights a step of several tokens rounds otherwise than
    a 1-token step, and real text has near ties. If this fails, the rows have become exact: drop the warning."""
    from core.chat.prompt import Message, encode_messages
    from core.lookahead import Decoding, LookaheadConfig
    from core.runtime.weights.variants import int8_copy

    model = int8_copy(default_loaded.model)
    texts = ["Name three colours.", "What are good ways to reduce stress?"]
    differing = 0
    for text in texts:
        ids = encode_messages(default_loaded.tokenizer, [Message("user", text)])
        plain = Decoding(model, ids, max_new_tokens=40)
        lookahead = Decoding(model, ids, lookahead=LookaheadConfig(5, 4, 5), max_new_tokens=40)
        list(plain), list(lookahead)
        differing += plain.tokens != lookahead.tokens
    assert differing > 0


def test_the_status_line_says_greedy_answers_may_vary_only_where_they_can(tiny_model_folder, app_paths) -> None:
    """Two asks of one greedy question agree unless Auto may run lookahead steps on weights that round by step size."""

    def load(**options):
        return load_model(
            ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu", **options), app_paths
        )

    fp32 = load(dtype="fp32")
    auto = cal.ensure_calibrated(fp32, app_paths)
    auto.relearn({"W0 N3 G1": (2.9, 3.0)})  # Auto has measured that verification pays on these answers
    assert any(arm is not None for arm in auto.calibration.arms())
    assert auto.rounding == "" and "may differ" not in auto.reason  # fp32: exact at every step size
    warned = cal.auto_reason(auto.calibration, "int8 weights")
    assert warned.startswith(auto.reason)
    assert "; greedy answers may differ slightly from run to run (int8 weights round differently" in warned

    assert cal.rounding_by_step_size(load(dtype="bf16")) == "bf16 weights"
    int8 = load(dtype="fp32", quantization="8bit")
    auto = cal.ensure_calibrated(int8, app_paths)
    compiled = int8.prepared.compiled
    # exact: the int8 decoder, whose rows do not depend on the step, runs every step
    exact = compiled is not None and compiled.decoder is not None
    assert exact == (kernels.supported() and auto.calibration.compiled_rows)
    assert auto.rounding == ("" if exact else "int8 weights")
    if exact or auto.calibration.arms() == [None]:  # every greedy answer is the same
        assert auto.reason == auto.calibration.reason
    else:
        assert auto.reason == cal.auto_reason(auto.calibration, "int8 weights") != auto.calibration.reason


def test_the_calibration_in_the_cache_serves_every_data_folder_and_an_old_one_is_still_read(
    tiny_loaded, app_paths, tmp_path
) -> None:
    from core.autotune.calibration import Calibration
    from core.autotune.curve import StepCostCurve
    from core.autotune.predict import grid, predict
    from core.paths import AppPaths

    curve = StepCostCurve((1, 2, 4, 8, 16, 32), (0.038, 0.040, 0.040, 0.042, 0.043, 0.048))
    calibration = Calibration("cpu", "float32", curve, predict(curve, grid("cpu")), 1.0)
    store = CalibrationStore.of(app_paths, tiny_loaded)
    assert store.path.parent == app_paths.calibration_dir and store.legacy.parent == app_paths.data_dir / "calibration"
    CalibrationStore(store.legacy, store.key).write(calibration)  # where an older version kept it
    assert store.read().curve == curve and not store.path.exists()
    store.add_learned(calibration, {"W0 N3 G1": (1.5, 3.0)})  # the next save writes it to the cache, learned kept
    other = AppPaths(tmp_path / "c2", tmp_path / "d2", app_paths.cache_dir, app_paths.calibration).ensure()
    again = CalibrationStore.of(other, tiny_loaded)  # a new data folder on the same machine
    assert again.path == store.path and again.read().curve == curve
    assert json.loads(again.path.read_text())["learned"] == {"W0 N3 G1": [1.5, 3.0]}
    assert AppPaths(tmp_path, tmp_path, tmp_path / "cache").calibration_dir == tmp_path / "cache" / "calibration"
