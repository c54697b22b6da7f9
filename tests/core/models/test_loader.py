"""load_model on real files: a good folder, progress, cancel, and every error the issue lists."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from core.models import (
    CorruptModelError,
    DeviceUnavailableError,
    LoadCancelledError,
    LoadOptions,
    ModelNotFoundError,
    ModelOutOfMemoryError,
    ModelSource,
    QuantizationUnavailableError,
    TokenizerMissingError,
    UnsupportedArchitectureError,
    load_model,
)
from core.paths import AppPaths
from core.progress import CancelToken

ROOT = Path(__file__).resolve().parents[3]
CPU = LoadOptions(device="cpu", dtype="fp32")


def _copy(folder: Path, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    dest.mkdir()
    for f in folder.iterdir():
        if f.name not in skip:
            shutil.copy(f, dest / f.name)
    return dest


def _load(folder: Path, paths: AppPaths, options: LoadOptions = CPU, **kw):
    return load_model(ModelSource("folder", str(folder)), options, paths, **kw)


# --- the good path -----------------------------------------------------------------------------


def test_load_local_folder(tiny_model_folder: Path, app_paths: AppPaths) -> None:
    stages: list[tuple[str, float]] = []
    loaded = _load(tiny_model_folder, app_paths, progress=lambda s, f: stages.append((s, f)))
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert not loaded.model.training
    assert loaded.device == torch.device("cpu") and loaded.dtype == torch.float32
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert loaded.quantization == "none"
    assert loaded.context_length == 1024
    assert loaded.parameters == sum(p.numel() for p in loaded.model.parameters())
    assert loaded.device_info.kind == "cpu"
    assert loaded.has_chat_template
    assert loaded.name == tiny_model_folder.name
    fractions = [f for _, f in stages]
    assert fractions == sorted(fractions), stages
    assert fractions[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in fractions)
    assert all(s for s, _ in stages)  # every report names its stage


def test_auto_dtype_on_cpu_loads_fp32_for_auto_to_measure(tiny_model_folder: Path, app_paths: AppPaths) -> None:
    if torch.cuda.is_available():
        pytest.skip("'auto' picks the GPU here; this checks the CPU default")
    loaded = _load(tiny_model_folder, app_paths, LoadOptions())
    assert loaded.dtype == torch.float32 and next(loaded.model.parameters()).dtype == torch.float32
    assert loaded.requested_dtype == "auto"  # core.autotune.prepare then keeps fp32 or converts to bf16


def test_cancel_before_load(tiny_model_folder: Path, app_paths: AppPaths) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(LoadCancelledError):
        _load(tiny_model_folder, app_paths, cancel=token)


def test_cancel_default_model_before_load(default_model_folder: Path, app_paths: AppPaths) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(LoadCancelledError):
        load_model(ModelSource(), CPU, app_paths, cancel=token)


def test_cancel_during_load(tiny_model_folder: Path, app_paths: AppPaths) -> None:
    token = CancelToken()

    def progress(stage: str, fraction: float) -> None:
        if fraction >= 0.45:  # the user presses Cancel while the configuration is read
            token.cancel()

    with pytest.raises(LoadCancelledError):
        _load(tiny_model_folder, app_paths, progress=progress, cancel=token)


# --- errors ------------------------------------------------------------------------------------


def test_missing_folder(tmp_path: Path, app_paths: AppPaths) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist") as err:
        _load(tmp_path / "no-such-model", app_paths)
    assert "Check the path" in str(err.value)


def test_folder_without_config(tmp_path: Path, app_paths: AppPaths) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        _load(tmp_path / "empty", app_paths)


def test_unreadable_config(tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths) -> None:
    folder = _copy(tiny_model_folder, tmp_path / "m", skip=("model.safetensors",))
    (folder / "config.json").write_text('{"model_type": "llama", ')
    with pytest.raises(CorruptModelError, match="config.json"):
        _load(folder, app_paths)


@pytest.mark.parametrize("keep", [0.5, 0.999, 100, 4], ids=["half", "all-but-a-little", "100-bytes", "4-bytes"])
def test_truncated_safetensors(tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths, keep: float) -> None:
    folder = _copy(tiny_model_folder, tmp_path / "m")
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(int(size * keep) if isinstance(keep, float) else keep)
    with pytest.raises(CorruptModelError, match="model.safetensors is truncated or damaged") as err:
        _load(folder, app_paths)
    assert "again" in err.value.todo


def test_garbage_safetensors_header(tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths) -> None:
    folder = _copy(tiny_model_folder, tmp_path / "m")
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:40] = b"\x00garbage, not the JSON header!!!"
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CorruptModelError, match="truncated or damaged"):
        _load(folder, app_paths)


def test_folder_without_weights(tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths) -> None:
    folder = _copy(tiny_model_folder, tmp_path / "m", skip=("model.safetensors",))
    with pytest.raises(CorruptModelError, match="weights"):
        _load(folder, app_paths)


def _encoder_configs():
    from transformers import BertConfig, T5Config

    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    return {
        "bert-mlm": BertConfig(architectures=["BertForMaskedLM"], **small),
        "bert-no-architectures": BertConfig(**small),
        "t5": T5Config(d_model=32, num_layers=1, num_heads=2, d_ff=64, architectures=["T5ForConditionalGeneration"]),
    }


@pytest.mark.parametrize("name", ["bert-mlm", "bert-no-architectures", "t5"])
def test_encoder_models_are_refused(name: str, tmp_path: Path, app_paths: AppPaths) -> None:
    folder = tmp_path / name
    _encoder_configs()[name].save_pretrained(folder)
    with pytest.raises(UnsupportedArchitectureError, match="not a decoder-only causal language model") as err:
        _load(folder, app_paths)
    assert "chat model" in err.value.todo


def test_folder_without_tokenizer(tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths) -> None:
    keep = {"config.json", "generation_config.json", "model.safetensors"}
    folder = _copy(
        tiny_model_folder, tmp_path / "m", skip=tuple(f.name for f in tiny_model_folder.iterdir() if f.name not in keep)
    )
    with pytest.raises(TokenizerMissingError, match="no usable tokenizer") as err:
        _load(folder, app_paths)
    assert "tokenizer.json" in err.value.todo


def test_tokenizer_without_chat_template_uses_plain_fallback(
    tiny_model_folder: Path, tmp_path: Path, app_paths: AppPaths
) -> None:
    from core.chat.prompt import Message, encode_messages, render_plain

    folder = _copy(tiny_model_folder, tmp_path / "m", skip=("chat_template.jinja",))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = _load(folder, app_paths)
    assert not loaded.has_chat_template
    messages = [Message("system", "Be brief."), Message("user", "Hi there")]
    text = loaded.tokenizer.decode(encode_messages(loaded.tokenizer, messages))
    assert text == render_plain(messages) == "System: Be brief.\n\nUser: Hi there\n\nAssistant: "


def test_cuda_asked_for_but_absent(tiny_model_folder: Path, app_paths: AppPaths) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a usable CUDA GPU, so the error cannot happen here")
    with pytest.raises(DeviceUnavailableError, match="CUDA was asked for") as err:
        _load(tiny_model_folder, app_paths, LoadOptions(device="cuda"))
    assert "'cpu'" in err.value.todo


@pytest.mark.parametrize("quantization", ["4bit", "8bit"])
def test_bitsandbytes_unavailable_on_cuda(quantization: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.models.loader import _resolve_quantization

    # A None entry makes `import bitsandbytes` raise ImportError, as on a machine without it.
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with pytest.raises(QuantizationUnavailableError, match=f"{quantization} quantization needs bitsandbytes") as err:
        _resolve_quantization(quantization, torch.device("cuda"), 10**6)
    assert "quantization 'none'" in err.value.todo


@pytest.mark.parametrize(("quantization", "kind"), [("8bit", "Int8WeightLinear"), ("4bit", "Int4WeightLinear")])
def test_cpu_quantization_uses_torch_kernels_without_bitsandbytes(
    quantization: str, kind: str, tiny_model_folder: Path, app_paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    loaded = _load(tiny_model_folder, app_paths, LoadOptions(device="cpu", quantization=quantization))
    assert loaded.quantization == quantization and loaded.requested_quantization == quantization
    assert loaded.dtype == torch.bfloat16  # dtype auto: the kernels are fastest with bf16 activations
    assert type(loaded.model.model.layers[0].mlp.up_proj).__name__ == kind
    assert loaded.model(torch.tensor([[1, 2, 3]])).logits.dtype == torch.bfloat16


def test_cpu_int8_of_a_model_too_big_for_fp32_is_quantized_from_bf16(
    tiny_model_folder: Path, app_paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM

    from core.models import loader
    from core.runtime.memory import SystemMemory
    from core.runtime.weights.quantized import Int8WeightLinear

    def expected(source: torch.dtype) -> torch.Tensor:
        linear = AutoModelForCausalLM.from_pretrained(tiny_model_folder, dtype=source).model.layers[0].mlp.up_proj
        return Int8WeightLinear.from_linear(linear).qweight

    assert not torch.equal(expected(torch.float32), expected(torch.bfloat16))  # the test tells the two apart
    for total, source in ((10**12, torch.float32), (1000, torch.bfloat16)):  # 1000 bytes: fp32 weights do not fit
        monkeypatch.setattr(loader, "system_memory", lambda total=total: SystemMemory(total=total, available=total))
        loaded = _load(tiny_model_folder, app_paths, LoadOptions(device="cpu", quantization="8bit"))
        assert torch.equal(loaded.model.model.layers[0].mlp.up_proj.qweight, expected(source))


OOM_SCRIPT = textwrap.dedent(
    """
    import re, resource, sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    import transformers.models.llama.modeling_llama  # imported before the limit, like a running app
    from core.models import LoadOptions, ModelSource, ModelError, load_model
    from core.paths import AppPaths
    paths = AppPaths(Path({tmp!r}) / "c", Path({tmp!r}) / "d", AppPaths.default().cache_dir)
    vm = int(re.search(r"VmSize:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024
    limit = vm + {extra_mb} * 2**20  # far less than the 540 MB of fp32 weights
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        load_model(ModelSource(), LoadOptions(device="cpu", dtype="fp32"), paths)
    except ModelError as err:
        print("RAISED", type(err).__name__, "|", err)
    else:
        print("LOADED")
    """
)


@pytest.mark.parametrize("extra_mb", [150, 700])
def test_out_of_memory_during_load(extra_mb: int, default_model_folder: Path, tmp_path: Path) -> None:
    """150 MB: allocating the weights fails; 700 MB: they fit, but then the mmap of the 540 MB file fails."""
    script = OOM_SCRIPT.format(root=str(ROOT), tmp=str(tmp_path), extra_mb=extra_mb)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "RAISED ModelOutOfMemoryError" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    message = proc.stdout.split("|", 1)[1]
    assert "does not fit in the computer's free memory" in message
    assert "4-bit" in message and "smaller model" in message
    assert ModelOutOfMemoryError.__name__ in proc.stdout
