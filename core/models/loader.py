"""Load a causal LM and its tokenizer from any model source, with progress, cancel and clear errors."""

from __future__ import annotations

import json
import logging
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.models.default_model import fetch_default_model
from core.models.device import DeviceInfo, cpu_auto_dtype, describe_device, resolve_device, resolve_dtype
from core.models.errors import (
    CorruptModelError,
    LoadCancelledError,
    ModelNotFoundError,
    ModelOutOfMemoryError,
    QuantizationUnavailableError,
    TokenizerMissingError,
    UnsupportedArchitectureError,
)
from core.models.gguf_file import cached_gguf_checkpoint, validate_gguf_path
from core.models.gguf_model import ARCHITECTURES, gguf_architecture, load_gguf_model
from core.models.hub import download_hub_model
from core.models.options import LoadOptions, ModelSource
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback, no_progress
from core.runtime.compiled import kernels
from core.runtime.compiled.int8_decoder import Int8Decoder, why_not_int8_decoder
from core.runtime.compiled.step import CompiledStep
from core.runtime.memory import system_memory
from core.runtime.prepared import PreparedModel
from core.runtime.weights.quantized import quantize_model

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.1
"""How often a load waiting on the kernels' build checks for a cancel."""
FOUR_BIT_THRESHOLD = 1_000_000_000  # parameters; at and above this, CUDA loads default to 4-bit NF4


@dataclass
class LoadedModel:
    """A model ready to generate, with what the app shows about it.

    ``prepared`` is the model as decoding runs it; preparing it for this machine (``core.autotune``)
    may replace it with a faster variant (another dtype, int8 weights, a compiled step), and then
    ``dtype`` and ``quantization`` say what it is now.
    """

    prepared: PreparedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    source: ModelSource
    device: torch.device
    dtype: torch.dtype
    quantization: str
    device_info: DeviceInfo
    context_length: int
    parameters: int
    load_seconds: float
    requested_dtype: str = "auto"  # what the options asked for; Auto may change ``dtype`` on the CPU
    requested_quantization: str = "auto"  # likewise: Auto may pick int8 weights on the CPU
    weights_as_stored: bool = False
    """A GGUF file's blocks run by the int8 decoder from the first step: the fastest path here already, nothing
    to convert or compile, so preparing it for this machine only measures Auto's curve (seconds)."""

    @property
    def model(self) -> Any:
        """The transformers model (``PreTrainedModel``)."""
        return self.prepared.model

    def run_as(
        self, prepared: PreparedModel, dtype: torch.dtype | None = None, quantization: str | None = None
    ) -> None:
        """Decode from now on with ``prepared``, a faster variant of this model (``dtype`` and ``quantization``:
        what it is, where it changed): the one place preparing for this machine swaps it in."""
        self.prepared = prepared
        if dtype is not None:
            self.dtype = dtype
        if quantization is not None:
            self.quantization = quantization

    @property
    def eos_token_ids(self) -> list[int]:
        """Every token that ends an answer: the tokenizer's EOS and the generation config's."""
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif configured:
            ids.update(int(i) for i in configured)
        return sorted(ids)

    @property
    def name(self) -> str:
        return self.source.display_name

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


def load_model(
    source: ModelSource,
    options: LoadOptions,
    paths: AppPaths,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> LoadedModel:
    """Load ``source`` as ``options`` say; raise a :class:`~core.models.errors.ModelError` on failure.

    Stages reported through ``progress``: fetch/convert (0-0.4), config, tokenizer, weights, ready.
    ``cancel`` is honoured between stages and during downloads.
    """
    start = time.perf_counter()

    def stage(text: str, lo: float, hi: float) -> ProgressCallback:
        return lambda inner, frac: progress(inner or text, lo + (hi - lo) * frac)

    if source.kind == "gguf" and reads_as_stored(source, options):
        loaded = _load_as_stored(source, options, paths, progress, cancel, start)
        if loaded is not None:
            return loaded
    folder = _local_folder(source, paths, stage("Preparing the model", 0.0, 0.4), cancel)
    _check(cancel)
    progress("Reading the model configuration", 0.45)
    config = _read_config(folder)
    device = resolve_device(options.device)
    parameters = _count_parameters(config)
    quantization = _resolve_quantization(options.quantization, device, parameters)
    dtype = resolve_dtype(options.dtype, device)
    # the widest float weights that leave the memory room (fp32, or bf16 for a big model): CPU only
    widest = cpu_auto_dtype(parameters, system_memory()) if device.type == "cpu" else torch.float32
    if device.type == "cpu" and options.dtype == "auto":
        # the CPU int8/int4 kernels are several times faster with bf16 activations
        dtype = torch.bfloat16 if quantization != "none" else widest
    _check(cancel)
    progress("Loading the tokenizer", 0.5)
    tokenizer = _load_tokenizer(folder)
    _check(cancel)
    progress("Loading the weights", 0.55)
    _validate_safetensors(folder)
    model = _load_weights(folder, device, dtype, quantization, options.attn_implementation, widest)
    model.eval()
    progress("Model ready", 1.0)
    return LoadedModel(
        prepared=PreparedModel(model),
        tokenizer=tokenizer,
        source=source,
        device=device,
        dtype=dtype,
        quantization=quantization,
        device_info=describe_device(device),
        context_length=int(getattr(config, "max_position_embeddings", 0) or 2048),
        parameters=parameters,
        load_seconds=time.perf_counter() - start,
        requested_dtype=options.dtype,
        requested_quantization=options.quantization,
    )


def reads_as_stored(source: ModelSource, options: LoadOptions) -> bool:
    """Whether a GGUF source loads with its weights as the file stores them (``core.models.gguf_model``): on the
    CPU, with dtype ``auto`` and quantization ``auto`` (or ``8bit``: the file's weights rounded to int8 at load),
    where our kernels run. Another dtype or quantization asks for the dequantized model, through transformers."""
    return (
        source.kind == "gguf"
        and options.dtype == "auto"
        and options.quantization in ("auto", "8bit")
        and resolve_device(options.device).type == "cpu"
        and kernels.supported()
    )


def _load_as_stored(
    source: ModelSource,
    options: LoadOptions,
    paths: AppPaths,
    progress: ProgressCallback,
    cancel: CancelToken | None,
    start: float,
) -> LoadedModel | None:
    """The GGUF file's model with its weights as stored, run by the int8 decoder from the first step; ``None``
    (then it loads through transformers) where the file holds another architecture or the kernels cannot be
    built here."""
    path = Path(source.location).expanduser()
    validate_gguf_path(path)
    if gguf_architecture(path) not in ARCHITECTURES:  # a damaged file is said by load_gguf_model below
        log.info("%s loads through transformers: its architecture is not read as stored", path.name)
        return None
    building = not kernels.library_path().exists()
    progress("Building the decoder's kernels (once, about 15 s)" if building else "Reading the model file", 0.1)
    pool = ThreadPoolExecutor(1, thread_name_prefix="kernels")
    kernels_loaded = pool.submit(kernels.load)  # a compiler child where missing, while the file is read
    pool.shutdown(wait=False)  # a cancel leaves the build to finish for the next load, without waiting for it
    try:
        built = load_gguf_model(path, paths.cache_dir, int8=options.quantization == "8bit")
    except UnsupportedArchitectureError as err:
        log.info("%s: %s", path.name, err.message)
        return None
    try:
        _wait(kernels_loaded, cancel)
    except LoadCancelledError:
        raise
    except Exception as err:  # no compiler, say: the dequantized model through transformers still answers
        log.warning("%s loads through transformers: our kernels cannot be built here (%s)", path.name, err)
        return None
    built.interleave_weights()
    reason = why_not_int8_decoder(built.model)
    if reason is not None:
        log.info("%s loads through transformers: %s", path.name, reason)
        return None
    decoder = Int8Decoder.of(built.model)
    progress("Model ready", 1.0)
    config = built.model.config
    return LoadedModel(
        prepared=PreparedModel(built.model, CompiledStep(None, None, decoder)),
        tokenizer=built.tokenizer,
        source=source,
        device=torch.device("cpu"),
        dtype=torch.float32,
        quantization="/".join(decoder.formats),
        device_info=describe_device(torch.device("cpu")),
        context_length=int(getattr(config, "max_position_embeddings", 0) or 2048),
        parameters=built.parameters,
        load_seconds=time.perf_counter() - start,
        requested_dtype=options.dtype,
        requested_quantization=options.quantization,
        weights_as_stored=True,
    )


def _local_folder(source: ModelSource, paths: AppPaths, progress: ProgressCallback, cancel: CancelToken | None) -> Path:
    if source.kind == "default":
        return fetch_default_model(paths, progress, cancel)
    if source.kind == "hub":
        return download_hub_model(source.location, paths.models_dir, progress, cancel)
    path = Path(source.location).expanduser()
    if source.kind == "gguf":
        return cached_gguf_checkpoint(path, paths.models_dir, progress)
    if not path.is_dir():
        raise ModelNotFoundError(f"The model folder {path} does not exist.", "Check the path, or choose another model.")
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"{path} has no config.json, so it is not a Hugging Face model folder.",
            "Choose the folder that holds config.json and the *.safetensors files.",
        )
    return path


def _read_config(folder: Path) -> Any:
    from transformers import AutoConfig  # transformers takes about a second to import: only when a model loads
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as err:
        raise CorruptModelError(f"The model's config.json cannot be read: {err}", "Download the model again.") from err
    model_type = getattr(config, "model_type", "?")
    architectures = list(getattr(config, "architectures", None) or [])
    causal_heads = [a for a in architectures if a.endswith(("ForCausalLM", "LMHeadModel"))]
    if (
        model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        or getattr(config, "is_encoder_decoder", False)
        or (architectures and not causal_heads)
        # BERT-like encoders have a causal head class too, but are decoders only with is_decoder=True.
        or (model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False))
    ):
        shown = ", ".join(architectures) or model_type
        raise UnsupportedArchitectureError(
            f"The model is a '{shown}', not a decoder-only causal language model, so it cannot chat.",
            "Choose a chat model such as a LLaMA, Mistral, Qwen or SmolLM instruct model.",
        )
    return config


def _count_parameters(config: Any) -> int:
    """Parameter count from the config alone (a meta-device model: no memory, no weights)."""
    from transformers import (
        AutoModelForCausalLM,  # transformers takes about a second to import: only when a model loads
    )

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _resolve_quantization(requested: str, device: torch.device, parameters: int) -> str:
    if requested == "auto":
        return "4bit" if device.type == "cuda" and parameters >= FOUR_BIT_THRESHOLD else "none"
    if requested == "none" or device.type == "cpu":
        return requested  # on the CPU, 8bit/4bit are PyTorch's own weight-only kernels (core.runtime.weights.quantized)
    try:
        import bitsandbytes  # noqa: F401
    except Exception as err:  # ImportError, or a native library that fails to load
        raise QuantizationUnavailableError(
            f"{requested} quantization needs bitsandbytes, which cannot be used here ({type(err).__name__}: {err}).",
            "Choose quantization 'none', or install bitsandbytes for your platform (pip install bitsandbytes).",
        ) from err
    return requested


def _load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer  # transformers takes about a second to import: only when a model loads

    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as err:
        raise TokenizerMissingError(
            f"The model folder {folder} has no usable tokenizer ({err}).",
            "Add the model's tokenizer files (tokenizer.json or tokenizer.model) to the folder.",
        ) from err


def _validate_safetensors(folder: Path) -> None:
    """Read every safetensors header and check the data fits the file: catches truncation early."""
    for file in sorted(folder.glob("*.safetensors")):
        size = file.stat().st_size
        try:
            with file.open("rb") as f:
                (header_len,) = struct.unpack("<Q", f.read(8))
                if header_len > size - 8:
                    raise ValueError("header longer than the file")
                header = json.loads(f.read(header_len))
            end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
            if 8 + header_len + end > size:
                raise ValueError(f"file is {size} bytes, its header needs {8 + header_len + end}")
        except (ValueError, KeyError, TypeError, struct.error) as err:
            raise CorruptModelError(
                f"The weights file {file.name} is truncated or damaged ({err}).", "Download or convert the model again."
            ) from err


def _load_weights(
    folder: Path, device: torch.device, dtype: torch.dtype, quantization: str, attn: str, quantize_from: torch.dtype
) -> Any:
    """The model's weights in ``dtype``; CPU int8/int4 weights are quantized from ``quantize_from`` ones
    (fp32, or bf16 for a model whose fp32 weights would crowd the memory: see ``cpu_auto_dtype``)."""
    from transformers import (
        AutoModelForCausalLM,  # transformers takes about a second to import: only when a model loads
    )

    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn}
    cpu_bits = {"8bit": 8, "4bit": 4}.get(quantization) if device.type == "cpu" else None
    if cpu_bits:
        kwargs["dtype"] = quantize_from  # then the rest is cast to ``dtype``
    elif quantization != "none":
        from transformers import (
            BitsAndBytesConfig,  # transformers takes about a second to import: only when a model loads
        )

        if quantization == "4bit":
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
            )
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
    if device.type == "cuda" or (quantization != "none" and not cpu_bits):
        kwargs["device_map"] = {"": device}
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        if "device_map" not in kwargs:
            model.to(device)
        if cpu_bits:
            quantize_model(model, cpu_bits)
            model.to(dtype)
        return model
    except torch.cuda.OutOfMemoryError as err:
        raise _oom(device) from err
    except MemoryError as err:
        raise _oom(device) from err
    except RuntimeError as err:
        text = str(err).lower()
        # "cannot allocate memory": safetensors' mmap of the weights failing (ENOMEM, errno 12).
        if any(s in text for s in ("out of memory", "can't allocate", "cannot allocate memory", "not enough memory")):
            raise _oom(device) from err
        raise
    except OSError as err:
        raise CorruptModelError(f"The weights cannot be read: {err}", "Download or convert the model again.") from err


def _oom(device: torch.device) -> ModelOutOfMemoryError:
    where = "GPU" if device.type == "cuda" else "computer"
    return ModelOutOfMemoryError(
        f"The model does not fit in the {where}'s free memory.",
        "Close other programs, choose 4-bit quantization, or pick a smaller model.",
    )


def _wait(future: Future[Any], cancel: CancelToken | None) -> Any:
    """The future's result, a cancel checked every :data:`CANCEL_POLL_S` while it runs."""
    while True:
        _check(cancel)
        try:
            return future.result(timeout=CANCEL_POLL_S)
        except FutureTimeout:
            pass


def _check(cancel: CancelToken | None) -> None:
    if cancel is not None and cancel.cancelled:
        raise LoadCancelledError()
