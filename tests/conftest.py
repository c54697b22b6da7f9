"""Shared fixtures: tiny seeded random models, the real default model, isolated app folders."""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core.models.default_model import default_model_dir, is_default_model_ready
from core.paths import AppPaths
from tests.remote_serve import Serve, start_serve

# inductor's C++ builder imports setuptools; once a test has imported the standard library's distutils,
# setuptools' own distutils shim then fails an assertion (compiling failed in a fresh clone's run)
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

TINY_VOCAB = 49152  # the default model's tokenizer, so tiny models can chat in real text


def tiny_llama_config(vocab_size: int = 256, **overrides):
    from transformers import LlamaConfig

    params = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    params.update(overrides)
    return LlamaConfig(**params)


def make_model(config, seed: int = 0, attn: str = "sdpa"):
    """A randomly initialised causal LM, seeded, fp32, eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config._attn_implementation = attn
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attn).eval()


@pytest.fixture(scope="session", autouse=True)
def session_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One compiled-step cache for the whole session, children and subprocesses included.

    Shared, a shape compiled by one test loads in the next (compiling takes seconds, loading a
    fraction); per session, no test depends on what an earlier run left in the user's cache, and
    none writes there. Tests that must see a compile set their own folder.
    """
    folder = tmp_path_factory.mktemp("inductor")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def session_user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user cache for the session (``LOOKAHEAD_CHAT_CACHE``, children and subprocesses included) whose
    ``models`` is the real cache's, where `make test` fetched the default model.

    What the app writes there beside the models (Auto's calibrations, GGUF metadata) then stays in the
    session: a calibration one run stored for the tiny model never changes how the next run's commands start.
    """
    real_models = AppPaths.default().models_dir
    real_models.mkdir(parents=True, exist_ok=True)
    folder = tmp_path_factory.mktemp("user-cache")
    (folder / "models").symlink_to(real_models, target_is_directory=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOOKAHEAD_CHAT_CACHE", str(folder))
        yield folder


@pytest.fixture(autouse=True)
def collectable_garbage() -> Iterator[None]:
    """The command line freezes what is alive for its process's exit (app.cli.collector); run in-process here,
    the next tests' objects must stay collectable."""
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def real_paths(session_user_cache: Path) -> AppPaths:
    """The user's folders (for the cached default model; the cache is the session's, see :func:`session_user_cache`)."""
    return AppPaths.default()


@pytest.fixture
def app_paths(tmp_path: Path, real_paths: AppPaths) -> AppPaths:
    """Fresh config, data and calibration folders; the model cache is the real one (the default model lives there)."""
    return AppPaths(tmp_path / "config", tmp_path / "data", real_paths.cache_dir, tmp_path / "calibration").ensure()


@pytest.fixture(scope="session")
def default_model_folder(real_paths: AppPaths) -> Path:
    """The converted default model; `make test` fetches it before the tests run."""
    if not is_default_model_ready(real_paths):
        pytest.fail(
            "The default model is not cached: run `make test` (it fetches it) or `lookahead-chat fetch-default`."
        )
    return default_model_dir(real_paths)


@pytest.fixture(scope="session")
def default_loaded(real_paths: AppPaths, default_model_folder: Path):
    """The real default model in fp32 on the CPU (loaded once per session)."""
    from core.models import LoadOptions, ModelSource, load_model

    return load_model(ModelSource(), LoadOptions(device="cpu", dtype="fp32"), real_paths)


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory: pytest.TempPathFactory, default_model_folder: Path) -> Path:
    """A tiny seeded random LLaMA saved as a real model folder, with the default model's tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    model = make_model(tiny_llama_config(TINY_VOCAB, max_position_embeddings=1024), seed=0)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        src = default_model_folder / name
        if src.exists():
            shutil.copy(src, folder / name)
    _compile_step_packages(folder, tmp_path_factory.mktemp("tiny-packages"))
    return folder


def _compile_step_packages(folder: Path, home: Path) -> None:
    """Compile the step packages of every variant Auto compares for the model in ``folder`` into the
    session's cache, side by side, as the app's background work does at a first start. Else every test
    that loads it starts that work again in children, and stops it unfinished when its window closes."""
    from core.engine.background import variant_makers
    from core.models import LoadOptions, ModelSource, load_model
    from core.runtime.compiled.parallel import compile_in_parallel

    loaded = load_model(ModelSource("folder", str(folder)), LoadOptions(device="cpu"), AppPaths(home, home, home))
    compile_in_parallel([make() for make in variant_makers(loaded)])


@pytest.fixture
def tiny_loaded(tiny_model_folder: Path, app_paths: AppPaths):
    """The tiny model loaded through the real loader (fp32, CPU)."""
    from core.models import LoadOptions, ModelSource, load_model

    return load_model(ModelSource("folder", str(tiny_model_folder)), LoadOptions(device="cpu", dtype="fp32"), app_paths)


def unmeasured(loaded):
    """``loaded`` ready to answer with Auto not measured (it decodes plain): what a cancelled calibration leaves."""
    from core.autotune.prepare import AutoTuning
    from core.chat.pools import ConversationPools
    from core.engine.ready import ReadyModel

    return ReadyModel(loaded, AutoTuning("Auto: plain (not measured in these tests)"), ConversationPools())


@pytest.fixture
def tiny_ready(tiny_loaded):
    """The tiny model ready to answer, Auto not measured."""
    return unmeasured(tiny_loaded)


@pytest.fixture(scope="session")
def remote_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The remote servers' home: the first measures Auto for the tiny model, the next find it stored."""
    return tmp_path_factory.mktemp("remote-home")


@pytest.fixture(scope="session")
def remote_serve(tiny_model_folder: Path, remote_home: Path) -> Iterator[Serve]:
    """One ``lookahead-chat serve`` on the tiny model for the session's remote-source tests (it starts in seconds
    and measures Auto once, some 30 s)."""
    served = start_serve(tiny_model_folder, remote_home)
    yield served
    served.stop()
