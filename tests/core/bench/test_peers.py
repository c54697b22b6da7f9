"""The peer benchmark's parts that need no llama.cpp build; the build itself is used only where present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.bench import peers
from core.bench.peers import PeerBuildError, PeerRow
from core.bench.report import Row
from core.paths import AppPaths
from core.runtime.prepared import PreparedModel
from core.runtime.weights.quantized import Int4WeightLinear, Int8WeightLinear
from tests.conftest import make_model, tiny_llama_config

# what llama-bench 11434 printed here for `-p 0 -n 16 -r 1 -o json` (fields past the result trimmed)
LLAMA_BENCH_JSON = """[
  {
    "build_commit": "unknown", "build_number": 0, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU",
    "model_filename": "/cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf", "model_type": "llama 256M Q4_1",
    "model_size": 96576768, "model_n_params": 134515008, "n_batch": 2048, "n_ubatch": 512, "n_threads": 2,
    "type_k": "f16", "type_v": "f16", "n_gpu_layers": -1, "flash_attn": -1, "repack": true,
    "n_prompt": 0, "n_gen": 16, "n_depth": 0, "test_time": "2026-11-30T20:37:56Z",
    "avg_ns": 16751499898, "stddev_ns": 0, "avg_ts": 0.955138, "stddev_ts": 0.000000,
    "samples_ns": [ 16751499898 ], "samples_ts": [ 0.955138 ]
  }
]"""


def test_llama_bench_json_gives_the_generation_rate() -> None:
    assert peers.parse_llama_bench(LLAMA_BENCH_JSON) == pytest.approx(0.955138)
    prompt_row = dict(json.loads(LLAMA_BENCH_JSON)[0], n_prompt=512, n_gen=0, avg_ts=900.0)
    both = json.dumps([prompt_row, json.loads(LLAMA_BENCH_JSON)[0]])
    assert peers.parse_llama_bench(both) == pytest.approx(0.955138)


@pytest.mark.parametrize("output", ["", "[]", "error: model not found", '[{"n_prompt": 512, "n_gen": 0}]'])
def test_llama_bench_without_a_result_is_an_error(output: str) -> None:
    with pytest.raises(PeerBuildError, match="no generation result"):
        peers.parse_llama_bench(output)


# what llama-completion 11434 printed here on stderr (the lines around the timings trimmed)
COMPLETION_TIMINGS = """0.00.449.342 I common_perf_print:    sampling time =       2.03 ms
0.00.449.346 I common_perf_print: prompt eval time =      25.10 ms /    44 tokens (    0.57 ms per token,  1752.99 tokens per second)
0.00.449.348 I common_perf_print:        eval time =    1367.42 ms /   127 runs   (   10.77 ms per token,    92.87 tokens per second)
0.00.449.349 I common_perf_print:       total time =    1400.36 ms /   171 tokens"""


def test_llama_completion_timings_give_the_generation_alone() -> None:
    assert peers.parse_completion(COMPLETION_TIMINGS) == (127, pytest.approx(1.36742))
    with pytest.raises(PeerBuildError, match="no generation timing"):
        peers.parse_completion(COMPLETION_TIMINGS.splitlines()[1])  # the prompt's evaluation only


def test_same_prompts_table_sets_auto_and_the_fastest_plain_against_llama_cpp() -> None:
    def row(method: str, tokens: int, seconds: float) -> Row:
        return Row("code", method, 1, tokens, seconds, 10, 1, None, None, fastest_plain="plain loop [int8]")

    rows = [row("plain loop [int8]", 120, 1.0), row("auto [int8]", 150, 1.0), row("plain loop [fp32]", 40, 1.0)]
    table = peers.same_prompts_table(rows, {"code": (100, 1.0)}, "title")
    assert table.splitlines()[-1] == "| code | 100.0 | 150.0 | 1.50x | plain loop [int8] | 120.0 | 1.20x |"


def test_command_lines() -> None:
    bench = Path("/c/bin/llama-bench")
    assert peers.llama_bench_command(bench, Path("/m.gguf"), 2) == [
        "/c/bin/llama-bench",
        "-m",
        "/m.gguf",
        "-t",
        "2",
        "-p",
        "0",
        "-n",
        "128",
        "-r",
        "3",
        "-o",
        "json",
    ]
    assert peers.quantize_command(Path("q"), Path("a.Q4_1.gguf"), Path("a.F16.gguf"), "F16") == [
        "q",
        "--allow-requantize",
        "a.Q4_1.gguf",
        "a.F16.gguf",
        "F16",
    ]
    build = peers.build_command(Path("/b"), 2)
    assert build[:2] == ["cmake", "--build"] and build[-4:] == [
        "--target",
        "llama-bench",
        "llama-quantize",
        "llama-completion",
    ]
    completion = peers.completion_command(Path("/c/bin/llama-completion"), Path("/m.gguf"), 2, "<|im_start|>user", 128)
    assert completion[0] == "/c/bin/llama-completion" and completion[-2:] == ["-p", "<|im_start|>user"]
    assert (
        all(flag in completion for flag in ("-no-cnv", "--no-warmup"))
        and completion[completion.index("--temp") + 1] == "0"
    )
    assert completion[completion.index("-t") + 1] == "2" and completion[completion.index("-n") + 1] == "128"
    configure = peers.configure_command(Path("/s"), Path("/b"))
    assert "-DBUILD_SHARED_LIBS=OFF" in configure and "-DCMAKE_BUILD_TYPE=Release" in configure


@pytest.mark.parametrize(
    ("capability", "build", "isa"), [("", "build", "-DGGML_NATIVE=ON"), ("avx2", "build-avx2", "-DGGML_AVX512=OFF")]
)
def test_tools_live_in_the_cache_built_for_the_instructions_torch_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capability: str, build: str, isa: str
) -> None:
    """Where torch is held to AVX2 (the project's emulation of an AVX2 processor), llama.cpp is built for AVX2 only."""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "cache")
    assert peers.tool_path(paths, "llama-bench") == tmp_path / f"cache/peers/llama.cpp-11434/{build}/bin/llama-bench"
    assert isa in peers.configure_command(Path("/s"), Path("/b"))


def test_the_source_precision_needs_no_requantization(tmp_path: Path) -> None:
    source = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert peers.gguf_at(AppPaths(tmp_path, tmp_path, tmp_path), source, "int4") == source


def test_table_has_ours_theirs_and_the_ratio() -> None:
    table = peers.peer_table([PeerRow.of("fp32", 8.0, 32.0), PeerRow.of("int8", 16.0, 64.0)], "title")
    assert "| fp32 / F32 | 8.0 | 32.0 | 0.25 |" in table and "| int8 / Q8_0 | 16.0 | 64.0 | 0.25 |" in table


def test_our_models_and_plain_rate() -> None:
    base = make_model(tiny_llama_config(96))
    assert our_dtype(peers.our_model(base, "fp32")) == torch.float32
    assert our_dtype(peers.our_model(base, "bf16")) == torch.bfloat16
    assert isinstance(peers.our_model(base, "int8").model.lm_head, Int8WeightLinear)
    assert isinstance(peers.our_model(base, "int4").model.model.layers[0].mlp.up_proj, Int4WeightLinear)
    assert isinstance(base.lm_head, torch.nn.Linear)  # copies: the base is untouched
    with pytest.raises(ValueError, match="Unknown precision"):
        peers.our_model(base, "fp8")
    assert peers.our_plain_rate(PreparedModel(base), tokens=8, repetitions=1) > 0


def our_dtype(model: PreparedModel) -> torch.dtype:
    return model.dtype


def test_real_llama_bench_when_built(real_paths: AppPaths) -> None:
    bench = peers.tool_path(real_paths, "llama-bench")
    gguf = real_paths.cache_dir / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not bench.is_file() or not gguf.is_file():
        pytest.skip("llama.cpp is not built here (run `lookahead-chat bench --peers llama.cpp` once)")
    assert peers.run_llama_bench(real_paths, gguf, threads=1, tokens=4, repetitions=1) > 0
    completion = peers.tool_path(real_paths, "llama-completion")
    if completion.is_file():
        tokens, seconds = peers.run_llama_completion(real_paths, gguf, 1, "<|im_start|>user\nHi<|im_end|>\n", 4)
        assert 1 <= tokens <= 4 and seconds > 0
