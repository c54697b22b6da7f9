"""The compiled steps (the 1-token layer and the rows layer, lookahead's wider steps; the int8 decoder for
int8 weights on x86-64): exact in fp32, row-exact in int8, used only where they can run, and eager where
compiling fails."""

from __future__ import annotations

import pytest
import torch

from core.lookahead import Decoding, LookaheadConfig
from core.runtime.compiled import kernels
from core.runtime.compiled.parallel import compile_in_parallel
from core.runtime.compiled.step import CompiledStep, compile_step, why_not_compilable
from core.runtime.lean_step import LlamaStep
from core.runtime.prepared import PreparedModel
from core.runtime.weights.packed import PACKED, PACKED_ROWS, apply_layout
from tests.conftest import TINY_VOCAB, make_model, tiny_llama_config


def compiled(model) -> PreparedModel:
    """``model`` with its compiled layers (the test fails where they do not compile); its two layers compile
    side by side where neither is in the session's cache."""
    compile_in_parallel([model])
    step = compile_step(model)
    assert isinstance(step, CompiledStep), step
    return PreparedModel(model, step)


def _eager_calls(prepared: PreparedModel) -> int:
    """The eager layer calls of a decoding: the prompt's, unless the int8 decoder runs it too."""
    return 0 if prepared.compiled is not None and prepared.compiled.decoder is not None else 1


def _prompt(seed: int) -> list[int]:
    head = torch.randint(3, 96, (16,), generator=torch.Generator().manual_seed(seed)).tolist()
    return head + head  # repeats: lookahead's drafts get accepted, so its steps are wide


def _layer_calls(model, decode) -> int:
    """How many times the first decoder layer's eager MLP module ran during ``decode()``; the eager LM
    head must have run as often (the compiled step computes its own)."""
    calls: list[str] = []
    hooks = [
        module.register_forward_hook(lambda *args, name=name: calls.append(name))
        for name, module in (("layer", model.model.layers[0].mlp), ("head", model.lm_head))
    ]
    try:
        decode()
    finally:
        for hook in hooks:
            hook.remove()
    assert calls.count("head") == calls.count("layer")
    return calls.count("layer")


@pytest.fixture(scope="module")
def compiled_fp32():
    model = make_model(tiny_llama_config(96), seed=3)  # the shape most tests here compile: one package for them all
    eager = {seed: Decoding(model, _prompt(seed), max_new_tokens=40) for seed in range(3)}
    for decoding in eager.values():
        list(decoding)
    return compiled(model), {seed: d.tokens for seed, d in eager.items()}


@pytest.mark.parametrize("seed", range(3))
def test_fp32_compiled_plain_and_lookahead_equal_eager_and_generate(compiled_fp32, seed: int) -> None:
    prepared, eager = compiled_fp32
    model = prepared.model
    prompt = _prompt(seed)
    plain = Decoding(prepared, prompt, max_new_tokens=40)
    assert _layer_calls(model, lambda: list(plain)) == 1  # the prefill only: every 1-token step ran compiled
    assert plain.tokens == eager[seed]
    for config in (LookaheadConfig(3, 3, 3), LookaheadConfig(0, 4, 3)):
        lookahead = Decoding(prepared, prompt, lookahead=config, max_new_tokens=40)
        assert _layer_calls(model, lambda lookahead=lookahead: list(lookahead)) == 1  # its wide steps ran compiled
        assert lookahead.tokens == plain.tokens, config.label
    with torch.inference_mode():
        generated = model.generate(
            torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
    assert generated == plain.tokens


@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_every_row_of_a_wide_compiled_step_agrees_with_the_eager_step(compiled_fp32, weights: str) -> None:
    """Lookahead's steps (2, 3, 8, 17 tokens, a tree-like mask, some rows kept) through the rows layer:
    each kept row's logits and every cache entry as the eager step computes them. Not bit for bit: the
    rows layer's products and attention are other kernels than eager's (fp32 agrees to rounding, int8
    to its activations' rounding)."""
    from core.runtime.weights.quantized import quantize_model

    if weights == "fp32":
        prepared = compiled_fp32[0]
    else:  # the quantized test's shapes: loaded from the session's cache
        model = make_model(tiny_llama_config(96), seed=7)
        quantize_model(model, 8)
        prepared = compiled(model)
    model = prepared.model
    # int8: the int8 decoder rounds each row's activations to integers where our kernel runs, the eager
    # step does not (weight-only); else both are weight-only, in other kernels
    integer_on = prepared.compiled is not None and prepared.compiled.decoder is not None
    assert integer_on == (weights == "int8" and kernels.supported())
    tolerance = 1e-5 if weights == "fp32" else 1e-2 if integer_on else 2e-3
    prompt = torch.tensor(_prompt(2))
    for size in (2, 3, 8, 17):
        mask = torch.full((size, size), torch.finfo(torch.float32).min).triu(1)
        mask[size // 2 :, 1 : size // 2] = torch.finfo(torch.float32).min  # a second branch, off the first
        keep = torch.tensor([0, size - 1])
        ids = torch.randint(3, 96, (size,), generator=torch.Generator().manual_seed(size))
        positions = torch.arange(len(prompt), len(prompt) + size)
        results = []
        for step in (LlamaStep(model, 64), prepared.step(64, lookahead=True)):
            with torch.inference_mode():
                step.forward(prompt, torch.arange(len(prompt)), 1)
                out: list[torch.Tensor] = []
                wide = (ids, positions, keep, mask)
                calls = _layer_calls(model, lambda step=step, out=out, wide=wide: out.append(step.forward(*wide)))
                results.append((out[0], step.cache.keys[0][: step.length].clone(), calls))
        (eager, eager_keys, eager_calls), (rows, rows_keys, rows_calls) = results
        assert eager_calls == 1 and rows_calls == 0  # the wide step ran compiled
        assert rows.shape == eager.shape == (2, model.config.vocab_size)
        assert torch.allclose(rows, eager, atol=tolerance, rtol=tolerance), (size, (rows - eager).abs().max())
        assert torch.allclose(rows_keys, eager_keys, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_a_token_of_a_wide_step_gets_the_logits_of_its_own_1_token_step(compiled_fp32, weights: str) -> None:
    """A chain of k tokens (k = 2, 3, 8, 17) fed in one step behind another branch (so its cache entries
    lie elsewhere than in 1-token steps), and the same chain fed one token at a time: the same logits.
    int8 through the int8 decoder (every step): bit for bit; fp32 (the 1-token layer and the rows layer,
    other kernels): to rounding."""
    from core.runtime.weights.quantized import quantize_model

    if weights == "fp32":
        prepared = compiled_fp32[0]
    else:
        model = make_model(tiny_llama_config(96), seed=7)
        quantize_model(model, 8)
        prepared = compiled(model)
    exact = prepared.compiled.decoder is not None
    assert exact == (weights == "int8" and kernels.supported())
    prompt = torch.tensor(_prompt(2))
    hidden = torch.finfo(torch.float32).min
    for size in (2, 3, 8, 17):
        chain = torch.randint(3, 96, (size,), generator=torch.Generator().manual_seed(size))
        other = torch.randint(3, 96, (3,), generator=torch.Generator().manual_seed(100 + size))
        ids = torch.cat([chain[:1], other, chain[1:]])  # x, a branch of 3 the chain must not see, the chain
        p = len(prompt)
        positions = torch.cat([torch.arange(p, p + 4), torch.arange(p + 1, p + size)])
        block = torch.full((size + 3, size + 3), hidden)
        block[:4, :4] = torch.zeros(4, 4).masked_fill(torch.ones(4, 4).triu(1).bool(), hidden)
        for row in range(size - 1):  # chain token row+1 sees x and the chain up to itself
            block[4 + row, 0] = 0
            block[4 + row, 4 : 5 + row] = 0
        keep = torch.tensor([0, *range(4, size + 3)])
        with torch.inference_mode():
            wide_step, token_step = prepared.step(64, lookahead=True), prepared.step(64, lookahead=False)
            for step in (wide_step, token_step):
                step.forward(prompt, torch.arange(p), 1)
            wide = wide_step.forward(ids, positions, keep, block)
            one_by_one = torch.cat(
                [token_step.forward(chain[i : i + 1], torch.tensor([p + i]), 1) for i in range(size)]
            )
        if exact:
            assert torch.equal(wide, one_by_one), (size, (wide - one_by_one).abs().max())
        else:
            assert torch.allclose(wide, one_by_one, rtol=1e-5, atol=1e-5), (size, (wide - one_by_one).abs().max())


def test_a_wide_step_reads_its_mask_given_as_a_view_of_a_wider_buffer(compiled_fp32) -> None:
    """A step's mask given as a view of a wider buffer: the compiled layer must read it as the mask it is,
    not as the contiguous tensor it was compiled for (the decoder once passed such a view, and the layer read
    the rows after the first from the wrong places: wrong attention for every guess, exact only for x's row,
    so lookahead accepted less and answered otherwise in bf16 and int8)."""
    prepared = compiled_fp32[0]
    prompt = torch.tensor(_prompt(1))
    size = 8
    mask = torch.full((size, size), torch.finfo(torch.float32).min).triu(1)
    mask[size // 2 :, 1 : size // 2] = torch.finfo(torch.float32).min
    buffer = torch.zeros(size + 5, size + 40)
    view = buffer[:size, :size]
    view.copy_(mask)
    ids = torch.randint(3, 96, (size,), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(len(prompt), len(prompt) + size)
    results = []
    for given in (mask, view):
        step = prepared.step(64, lookahead=True)
        with torch.inference_mode():
            step.forward(prompt, torch.arange(len(prompt)), 1)
            results.append(step.forward(ids, positions, torch.arange(size), given))
    assert not view.is_contiguous() and torch.equal(results[0], results[1])


def test_the_cache_grows_under_the_compiled_step(compiled_fp32) -> None:
    prepared, eager = compiled_fp32
    step = prepared.step(4, lookahead=False)  # far too small: the buffers double while compiled steps write to them
    prompt = _prompt(0)
    with torch.inference_mode():
        token = int(step.forward(torch.tensor(prompt), torch.arange(len(prompt)), 1)[-1].argmax())
        out = [token]
        for i in range(11):
            logits = step.forward(torch.tensor([token]), torch.tensor([len(prompt) + i]), 1)
            token = int(logits[-1].argmax())
            out.append(token)
    assert out == eager[0][:12] and step.cache.capacity >= len(prompt) + 11


@pytest.mark.skipif(not kernels.supported(), reason="the int8 decoder needs our kernels (x86-64 with AVX2)")
def test_the_cache_grows_under_the_int8_decoder() -> None:
    """The decoder holds the cache's buffers (checked once): when they double, it must take the new ones."""
    from core.runtime.weights.quantized import quantize_model

    model = make_model(tiny_llama_config(96), seed=5)
    quantize_model(model, 8)
    prepared = compiled(model)
    assert prepared.compiled is not None and prepared.compiled.decoder is not None
    expected = Decoding(prepared, _prompt(5), max_new_tokens=12)
    list(expected)
    step = prepared.step(4, lookahead=False)
    prompt = _prompt(5)
    with torch.inference_mode():
        out = step.greedy(step.forward(torch.tensor(prompt), torch.arange(len(prompt)), 1))
        for i in range(11):
            out += step.greedy(step.forward(torch.tensor(out[-1:]), torch.tensor([len(prompt) + i]), 1))
    assert out == expected.tokens and step.cache.capacity >= 2 * len(prompt)


def test_bf16_compiled_step_runs_on_the_rows_copy_and_agrees_with_eager(tiny_model_folder) -> None:
    # the session's tiny model's shape: its bf16 packages, compiled for Auto's variants, load here
    model = make_model(tiny_llama_config(TINY_VOCAB, max_position_embeddings=1024), seed=4)
    model = model.to(torch.bfloat16)
    try:
        apply_layout(model, PACKED_ROWS)
    except RuntimeError as err:  # oneDNN packs bf16 only with AVX-512 or AVX-NE-CONVERT (choose_layout keeps plain)
        pytest.skip(str(err))
    prompt = _prompt(1)
    with torch.inference_mode():
        eager_step = LlamaStep(model, 64)
        eager_step.forward(torch.tensor(prompt), torch.arange(len(prompt)), 1)
        eager = eager_step.forward(torch.tensor([7]), torch.tensor([len(prompt)]), 1)
    prepared = compiled(model)
    with torch.inference_mode():
        step = prepared.step(64, lookahead=False)
        step.forward(torch.tensor(prompt), torch.arange(len(prompt)), 1)
        logits = step.forward(torch.tensor([7]), torch.tensor([len(prompt)]), 1)
    # bf16: the compiled layer keeps fp32 between operators where eager rounds to bf16, so the logits
    # agree to bf16's precision, not bit for bit (fp32 is exact: the tests above)
    assert logits.shape == eager.shape == (1, model.config.vocab_size)  # the whole head, from the last layer's call
    assert torch.allclose(logits.float(), eager.float(), atol=0.05, rtol=0.02)
    decoding = Decoding(prepared, prompt, max_new_tokens=12)
    assert _layer_calls(model, lambda decoding=decoding: list(decoding)) == 1 and len(decoding.tokens) == 12


def test_models_it_cannot_run_keep_the_eager_step() -> None:
    packed = make_model(tiny_llama_config(96), seed=0)
    apply_layout(packed, PACKED)  # packed without a plain copy: no plain weights to compile against
    assert "packed-only" in why_not_compilable(packed)
    assert isinstance(compile_step(packed), str)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_weights_compile_and_decode_as_their_eager_step(bits: int) -> None:
    from core.runtime.weights.quantized import quantize_model

    model = make_model(tiny_llama_config(96), seed=7)
    quantize_model(model, bits)  # fp32 activations: the compiled step must give the eager quantized step's tokens
    prompts = [_prompt(seed) for seed in range(2)]
    eager = [Decoding(model, prompt, max_new_tokens=24) for prompt in prompts]
    for decoding in eager:
        list(decoding)
    prepared = compiled(model)
    for prompt, expected in zip(prompts, eager):
        decoding = Decoding(prepared, prompt, max_new_tokens=24)
        assert _layer_calls(model, lambda decoding=decoding: list(decoding)) == _eager_calls(prepared)
        assert decoding.tokens == expected.tokens


def test_models_loaded_one_after_another_each_run_their_own_compiled_step() -> None:
    """Switching models in the app: each shape and kind of weights gets its own compiled layer."""
    from core.runtime.weights.quantized import quantize_model

    # the fp32, int8 and int4 layers are the other tests' (in the session's cache they load), the biased one compiles
    models = [make_model(tiny_llama_config(96), seed=s) for s in range(3)]
    quantize_model(models[1], 8)
    quantize_model(models[2], 4)
    models.append(make_model(tiny_llama_config(96, attention_bias=True, mlp_bias=True), seed=3))  # joined biases
    compile_in_parallel(models)  # what is not in the cache yet compiles side by side, as calibration does
    prepared = [compiled(model) for model in models]
    for model in prepared:
        decoding = Decoding(model, _prompt(1), max_new_tokens=12)
        assert _layer_calls(model.model, lambda decoding=decoding: list(decoding)) == _eager_calls(model)
        expected = Decoding(model.model, _prompt(1), max_new_tokens=12)  # eager
        list(expected)
        assert decoding.tokens == expected.tokens


def test_a_failing_compiler_leaves_the_eager_step(tmp_path, monkeypatch) -> None:
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # nothing cached: it must compile
    model = make_model(tiny_llama_config(96, hidden_size=80, num_attention_heads=5, num_key_value_heads=5), seed=2)
    prompt = _prompt(2)
    expected = Decoding(model, prompt, max_new_tokens=10)
    list(expected)
    with inductor_config.patch({"cpp.cxx": (None, str(tmp_path / "no-such-compiler"))}):
        reason = compile_step(model)
    assert isinstance(reason, str) and reason.startswith("compiling failed")
    assert not list((tmp_path / "inductor").rglob("layer-*"))  # no package, whole or partial
    again = Decoding(model, prompt, max_new_tokens=10)
    list(again)
    assert again.tokens == expected.tokens


def test_without_a_compiler_a_fresh_process_measures_on_with_the_eager_step(tmp_path) -> None:
    """In a new process with no compiler installed, compiling fails and calibration must go on eager
    (it once failed whole, when inductor's own probe of the vector instructions failed first)."""
    import os
    import subprocess
    import sys

    code = (
        "from tests.conftest import make_model, tiny_llama_config\n"
        "from core.autotune.prepare import fastest_step\n"
        "print('compiled:', fastest_step(make_model(tiny_llama_config(96), seed=1)).compiled)\n"
    )
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-compiler"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("compiled: None"), done.stdout
    assert "stays eager: compiling failed:" in done.stderr and "No working C++ compiler" in done.stderr


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="needs AVX-512 to emulate AVX2 (on an AVX2 processor every other test here runs that form)",
)
def test_with_avx2_the_products_read_the_model_dtype_and_int8_takes_the_int8_decoder(tmp_path) -> None:
    """The form the compiled step takes on processors without AVX-512 (emulated: ATEN_CPU_CAPABILITY=avx2)
    decodes as the eager step does, for float and int8 weights."""
    import os
    import subprocess
    import sys

    code = (
        "from tests.conftest import make_model, tiny_llama_config\n"
        "from core.lookahead import Decoding\n"
        "from core.runtime.weights.quantized import quantize_model\n"
        "from core.runtime.compiled.parallel import compile_in_parallel\n"
        "from tests.core.runtime.test_compiled_step import _eager_calls, _layer_calls, _prompt, compiled\n"
        "models = {bits: make_model(tiny_llama_config(96), seed=7) for bits in (None, 8)}\n"
        "quantize_model(models[8], 8)\n"
        "compile_in_parallel(list(models.values()))  # side by side, as calibration compiles them\n"
        "for bits, model in models.items():\n"
        "    eager = Decoding(model, _prompt(0), max_new_tokens=24); list(eager)\n"
        "    prepared = compiled(model)\n"
        "    assert (prepared.compiled.decoder is not None) == (bits == 8), prepared.compiled\n"
        "    if bits is None:\n"
        "        spec = prepared.compiled.rows.spec\n"
        "        assert 'avx2' in spec.machine and not spec.fp32_products, spec\n"
        "    decoding = Decoding(prepared, _prompt(0), max_new_tokens=24)\n"
        "    assert _layer_calls(model, lambda decoding=decoding: list(decoding)) == _eager_calls(prepared)\n"
        "    assert decoding.tokens == eager.tokens, (bits, decoding.tokens, eager.tokens)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_a_model_converted_after_compiling_runs_eager_again() -> None:
    """Compiled code fits one dtype: after ``model.to(bfloat16)`` the step must not feed it bf16 weights."""
    model = make_model(tiny_llama_config(96), seed=4)
    prepared = compiled(model)
    model.to(torch.bfloat16)
    converted = Decoding(prepared, _prompt(4), max_new_tokens=12)
    assert _layer_calls(model, lambda: list(converted)) == 12  # every step eager
    expected = Decoding(model, _prompt(4), max_new_tokens=12)
    list(expected)
    assert converted.tokens == expected.tokens


@pytest.mark.skipif(not kernels.supported(), reason="the int8 decoder needs our kernels (x86-64 with AVX2)")
def test_an_int8_model_whose_tensors_change_after_its_decoder_was_made_runs_eager() -> None:
    """The decoder holds the model's tensors as they were (norms and scales copied to fp32): once one of them
    is replaced (a layer's norm here, or the model converted), its steps would compute the old model."""
    from core.runtime.weights.quantized import quantize_model

    model = make_model(tiny_llama_config(96), seed=6)
    quantize_model(model, 8)
    prepared = compiled(model)
    assert prepared.compiled is not None and prepared.compiled.decoder is not None
    unchanged = Decoding(prepared, _prompt(6), max_new_tokens=12)
    assert _layer_calls(model, lambda: list(unchanged)) == 0  # every step, the prompt's too, in the decoder
    norm = model.model.layers[1].post_attention_layernorm
    norm.weight = torch.nn.Parameter(norm.weight.detach() * 3)
    changed = Decoding(prepared, _prompt(6), max_new_tokens=12)
    assert _layer_calls(model, lambda: list(changed)) == 12  # every step eager
    expected = Decoding(model, _prompt(6), max_new_tokens=12)
    list(expected)
    assert changed.tokens == expected.tokens


def test_a_damaged_package_is_compiled_again(tmp_path, monkeypatch) -> None:
    import shutil

    from core.runtime.compiled.package import compile_jobs

    model = make_model(tiny_llama_config(96), seed=5)
    compiled(model)  # in the session's cache: loaded there if an earlier test compiled this shape
    wholes = [job.path for job in compile_jobs(model)]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    for whole, job in zip(wholes, compile_jobs(model)):
        job.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(whole, job.path)
    packages = sorted((tmp_path / "inductor" / "lookahead-steps").glob("*.pt2"))
    assert len(packages) == 2  # the 1-token layer's and the rows layer's
    packages[0].write_bytes(b"not a package")  # a disk error, or a copy cut short
    prepared = compiled(model)
    assert packages[0].stat().st_size > 1000
    decoding = Decoding(prepared, _prompt(5), max_new_tokens=10)
    assert _layer_calls(model, lambda decoding=decoding: list(decoding)) == 1
