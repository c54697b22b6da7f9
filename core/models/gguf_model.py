"""A LLaMA-family model straight from a GGUF file's blocks, as the file stores them.

The file is memory-mapped and every Q4_K, Q6_K, Q5_0 or Q8_0 weight becomes a view of its blocks
(``core.runtime.weights.blocks``): no fp32 model is built and nothing is converted to disk, so the model takes
about the file's memory, and a warm load (the file in the page cache) only maps it. Once our kernels are built
(while the file is read), :meth:`GGUFModel.interleave_weights` lays each Q4_K or Q6_K weight out 8 rows at a time
(a copy in memory, made in milliseconds; the file's pages read for it are given back), which the products read at
about twice the speed. A weight of another type
(F32, F16, Q4_0, Q5_K, ...) is dequantized once and kept as int8 with a scale per channel, which the same int8
decoder reads. The configuration comes from the file's metadata as transformers maps its keys, the tokenizer
from transformers' GGUF tokenizer reader, and both are kept in the cache so that the next load reads them in
milliseconds. (transformers' own configuration read of a qwen2 or llama file parses every tensor and array:
8-10 s on a 1.5B file, read again for the tokenizer.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.models.errors import CorruptModelError, UnsupportedArchitectureError
from core.models.gguf_index import GGUFIndex, TensorInfo, read_index
from core.runtime.weights.blocks import BLOCK_FORMATS, BlockEmbedding, BlockLinear, dequantize, reads_as_stored
from core.runtime.weights.quantized import Int8WeightLinear, quantize_rows

log = logging.getLogger(__name__)

ARCHITECTURES = ("llama", "qwen2")
"""GGUF architectures read as stored: the LLaMA layer (qwen2 with q/k/v biases). llama's q and k rows are
stored permuted for llama.cpp's rotary layout and are put back in transformers' order at load."""

METADATA_VERSION = 2
"""Bumped when what is kept of a file's configuration and tokenizer changes."""


@dataclass
class GGUFModel:
    """A model built from a GGUF file's blocks, its tokenizer, and what it holds."""

    model: Any  # a transformers causal LM whose projections read the file's blocks
    tokenizer: Any
    parameters: int
    formats: dict[str, int]  # the weights' GGUF types (as stored, or "int8" where converted) -> bytes
    index: GGUFIndex
    as_stored: list[tuple[BlockLinear, TensorInfo]]  # the projections that read the file's blocks, and their tensors

    def interleave_weights(self) -> None:
        """Every Q4_K and Q6_K projection interleaved (:meth:`BlockLinear.interleave`; our kernels must run),
        the file's pages it read given back."""
        for module, tensor in self.as_stored:
            if module.interleave():
                self.index.release(tensor)
        self.as_stored.clear()


def load_gguf_model(path: Path, cache_dir: Path, int8: bool = False) -> GGUFModel:
    """The model in ``path`` (a GGUF file of an :data:`ARCHITECTURES` model), its weights as stored (``int8``:
    every projection and the head rounded to int8 per output channel instead, from the file's values); the
    configuration and tokenizer from ``cache_dir`` where a former load kept them. Raises a
    :class:`~core.models.errors.ModelError` for a file it cannot read."""
    index = _index(path)
    architecture = index.architecture
    if architecture not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"The GGUF file {path.name} holds a '{architecture}' model, which is not read as stored.",
            "It loads through transformers instead.",
        )
    from transformers import AutoModelForCausalLM  # transformers takes seconds to import: only for a model

    config, tokenizer, generation = _metadata(path, index, cache_dir)
    with torch.device("meta"):  # the skeleton: every weight is replaced by the file's
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = generation
    formats: dict[str, int] = {}
    tensors = index.tensors
    builder = _Builder(index, formats, architecture, config, path.name, int8)
    inner = model.model
    inner.embed_tokens = builder.embedding("token_embd.weight")
    for index, layer in enumerate(inner.layers):
        attn, mlp = layer.self_attn, layer.mlp
        for module, name, attribute in (
            (attn, "attn_q", "q_proj"),
            (attn, "attn_k", "k_proj"),
            (attn, "attn_v", "v_proj"),
            (attn, "attn_output", "o_proj"),
            (mlp, "ffn_gate", "gate_proj"),
            (mlp, "ffn_up", "up_proj"),
            (mlp, "ffn_down", "down_proj"),
        ):
            setattr(module, attribute, builder.linear(f"blk.{index}.{name}", attribute))
        layer.input_layernorm.weight = builder.norm(f"blk.{index}.attn_norm.weight")
        layer.post_attention_layernorm.weight = builder.norm(f"blk.{index}.ffn_norm.weight")
    inner.norm.weight = builder.norm("output_norm.weight")
    head = "output" if "output.weight" in tensors else "token_embd"  # a tied head reads the embedding's blocks
    model.lm_head = builder.linear(head, "lm_head")
    inner.rotary_emb = type(inner.rotary_emb)(config=config)
    left = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise CorruptModelError(
            f"The GGUF file {path.name} lacks {len(left)} tensors the model needs (such as {left[0]}).",
            "Download the file again.",
        )
    model.eval()
    parameters = sum(t.n_elements for t in tensors.values())
    return GGUFModel(model, tokenizer, parameters, formats, builder.index, builder.as_stored)


def gguf_architecture(path: Path) -> str:
    """The architecture the GGUF file holds (``qwen2``, ``llama``, ...), read from its header in milliseconds."""
    return _index(path).architecture


def _index(path: Path) -> GGUFIndex:
    try:
        return read_index(path)
    except Exception as err:  # a damaged file fails in many ways (struct, unicode, gguf's type table)
        raise CorruptModelError(
            f"The GGUF file {path.name} is damaged or truncated ({type(err).__name__}: {err}).",
            "Download the file again.",
        ) from err


class _Builder:
    """The model's modules from the file's tensors."""

    def __init__(
        self, index: GGUFIndex, formats: dict[str, int], architecture: str, config: Any, file: str, int8: bool
    ) -> None:
        self.index, self.tensors, self.formats, self.config, self.file = index, index.tensors, formats, config, file
        self.int8 = int8
        self.permutes = architecture == "llama"
        self.as_stored: list[tuple[BlockLinear, TensorInfo]] = []

    def _tensor(self, name: str) -> TensorInfo:
        tensor = self.tensors.get(name)
        if tensor is None:
            raise CorruptModelError(f"The GGUF file {self.file} has no tensor {name}.", "Download the file again.")
        return tensor

    def _blocks(self, tensor: TensorInfo) -> tuple[torch.Tensor, int, int]:
        """A tensor's rows of bytes (a view of the file), its GGUF type and its inputs."""
        inputs = tensor.shape[0]
        data = torch.from_numpy(self.index.bytes_of(tensor).reshape(tensor.n_elements // inputs, -1))
        return data, tensor.tensor_type, inputs

    def _float(self, tensor: TensorInfo) -> torch.Tensor:
        """A tensor of any type as fp32 (its GGML shape reversed, as torch orders it)."""
        data, format_id, inputs = self._blocks(tensor)
        if format_id == 0:  # F32
            return data.view(torch.float32).clone()
        if format_id == 1:  # F16
            return data.view(torch.float16).float()
        return dequantize(data, format_id)

    def norm(self, name: str) -> nn.Parameter:
        return nn.Parameter(self._float(self._tensor(name)).reshape(-1), requires_grad=False)

    def _bias(self, name: str) -> torch.Tensor | None:
        tensor = self.tensors.get(name)
        return None if tensor is None else self._float(tensor).reshape(-1)

    def _rows_in_order(self, rows: torch.Tensor, attribute: str) -> torch.Tensor:
        """llama's q and k rows (or biases) back in transformers' order (see :data:`ARCHITECTURES`)."""
        if not self.permutes or attribute not in ("q_proj", "k_proj"):
            return rows
        heads = self.config.num_attention_heads if attribute == "q_proj" else self.config.num_key_value_heads
        order = torch.arange(rows.shape[0]).reshape(heads, -1, 2).transpose(1, 2).reshape(-1)
        return rows[order].contiguous()

    def linear(self, prefix: str, attribute: str) -> nn.Module:
        tensor = self._tensor(f"{prefix}.weight")
        blocks, format_id, inputs = self._blocks(tensor)
        bias = self._bias(f"{prefix}.bias")
        if bias is not None:
            bias = self._rows_in_order(bias, attribute)
        if reads_as_stored(format_id, inputs) and not self.int8:
            self._count(BLOCK_FORMATS[format_id][0], blocks.numel())
            module = BlockLinear(self._rows_in_order(blocks, attribute), format_id, inputs, bias)
            self.as_stored.append((module, tensor))
            return module
        if format_id in (0, 1):  # F32, F16: the whole weight
            weight = self._rows_in_order(self._float(tensor), attribute)
            qweight, scales = quantize_rows(weight.shape, lambda start, stop: weight[start:stop])
        else:  # dequantized a few rows at a time: a head's fp32 copy alone is 0.9 GB on a 1.5B model
            ordered = self._rows_in_order(blocks, attribute)
            qweight, scales = quantize_rows(
                (blocks.shape[0], inputs), lambda start, stop: dequantize(ordered[start:stop], format_id)
            )
        self._count("int8", qweight.numel())
        return Int8WeightLinear(qweight, scales, bias)

    def embedding(self, name: str) -> nn.Module:
        tensor = self._tensor(name)
        blocks, format_id, inputs = self._blocks(tensor)
        if reads_as_stored(format_id, inputs):
            return BlockEmbedding(blocks, format_id, inputs)
        return nn.Embedding.from_pretrained(self._float(tensor), freeze=True)

    def _count(self, format_name: str, size: int) -> None:
        self.formats[format_name] = self.formats.get(format_name, 0) + size


def metadata_dir(path: Path, cache_dir: Path) -> Path:
    """Where a GGUF file's configuration and tokenizer are kept, keyed by its path, size and modification time."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{METADATA_VERSION}"
    return cache_dir / "gguf-metadata" / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def config_dict(index: GGUFIndex, file: str) -> dict[str, Any]:
    """The transformers configuration of the file's model: its metadata renamed by transformers' own GGUF key
    mapping, the vocabulary from the embedding's rows, a tied head where the file has no ``output.weight``."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING  # transformers: only for a model

    architecture, metadata = index.architecture, index.metadata
    config: dict[str, Any] = {"model_type": architecture}
    for key, name in GGUF_CONFIG_MAPPING[architecture].items():
        if name and f"{architecture}.{key}" in metadata:
            config[name] = metadata[f"{architecture}.{key}"]
    embedding = index.tensors.get("token_embd.weight")
    if embedding is None:
        raise CorruptModelError(f"The GGUF file {file} has no tensor token_embd.weight.", "Download the file again.")
    config["vocab_size"] = embedding.shape[-1]  # GGML order: inputs first
    config["tie_word_embeddings"] = "output.weight" not in index.tensors
    for name, key in (
        ("bos_token_id", "bos_token_id"),
        ("eos_token_id", "eos_token_id"),
        ("pad_token_id", "padding_token_id"),
    ):
        if f"tokenizer.ggml.{key}" in metadata:
            config[name] = metadata[f"tokenizer.ggml.{key}"]
    return config


def _metadata(path: Path, index: GGUFIndex, cache_dir: Path) -> tuple[Any, Any, Any]:
    """The model's configuration, tokenizer and generation configuration: kept ones, or read from the file
    (seconds: the tokenizer is built from its vocabulary) and kept."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig  # transformers: only for a model
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    kept = metadata_dir(path, cache_dir)
    if (kept / "done").is_file():
        try:
            return (
                AutoConfig.from_pretrained(kept),
                AutoTokenizer.from_pretrained(kept),
                GenerationConfig.from_pretrained(kept),
            )
        except (OSError, ValueError) as err:
            log.warning("reading the GGUF file's metadata again: the kept copy does not load (%s)", err)
    folder, name = str(path.parent), path.name
    try:
        config = AutoConfig.for_model(**config_dict(index, name))
        # a tokenizer type skips transformers' whole-file configuration read; llama has none (another read, once)
        kind = index.architecture if index.architecture in TOKENIZER_MAPPING_NAMES else None
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, tokenizer_type=kind)
        generation = GenerationConfig.from_model_config(config)  # what transformers' own GGUF load makes
    except (ValueError, KeyError, OSError) as err:
        raise CorruptModelError(f"transformers could not read {name}: {err}", "Download the file again.") from err
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    try:
        partial = kept.with_name(kept.name + ".partial")
        config.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        generation.save_pretrained(partial)
        (partial / "done").write_text(json.dumps({"file": str(path)}) + "\n")
        if kept.exists():
            import shutil  # only where an unreadable copy is replaced

            shutil.rmtree(kept)
        partial.rename(kept)
    except OSError as err:  # a full disk, say: the next load reads the file's metadata again
        log.warning("could not keep the GGUF file's metadata in %s: %s", kept, err)
    return config, tokenizer, generation
