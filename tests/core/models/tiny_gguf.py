"""Write small but real GGUF files with gguf.GGUFWriter (no download, no llama.cpp).

``write_tiny_llama_gguf`` stores a seeded tiny LLaMA the way llama.cpp's converter does (the q/k
rows permuted for its rotary layout, a byte-level BPE vocabulary, a ChatML template), so that
transformers dequantises it back into exactly the same model.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import gguf
import numpy as np
import torch

from core.runtime.weights.blocks import BlockLinear, dequantize


def _root_conftest():
    """tests/conftest.py by path: `from conftest import` is ambiguous once other folders have a conftest.py."""
    name = "_lookahead_tests_root_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[2] / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


make_model = _root_conftest().make_model
tiny_llama_config = _root_conftest().tiny_llama_config

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_tokens() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    b2u = bytes_to_unicode()
    return [b2u[b] for b in range(256)]


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """HF q/k rows -> llama.cpp's interleaved rotary layout (transformers undoes this on load)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_llama_gguf(path: Path, seed: int = 0):
    """Write a tiny llama GGUF (about 0.4 MB, fp32 tensors) and return the model it holds."""
    tokens = [*_byte_tokens(), "<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u0120t"]
    config = tiny_llama_config(len(tokens), bos_token_id=257, eos_token_id=258, pad_token_id=256)
    model = make_model(config, seed=seed)
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3, 3, 3, 1])  # 3: control tokens
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(257)
    w.add_eos_token_id(258)
    w.add_pad_token_id(256)
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], config.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], config.num_key_value_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])  # no output.weight: tied embeddings
    _finish(w)
    return model


def write_metadata_gguf(path: Path, architecture: str) -> None:
    """A valid GGUF with only a little metadata and one small tensor, of any architecture name."""
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    _finish(w)


def _finish(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


BLOCK_SCALES = {  # (offset of each fp16 scale in a block, its value): weights of about +-0.05
    gguf.GGMLQuantizationType.Q4_K: ((0, 1e-4), (2, 8e-4)),
    gguf.GGMLQuantizationType.Q6_K: ((208, 2e-5),),
    gguf.GGMLQuantizationType.Q5_0: ((0, 4e-3),),
    gguf.GGMLQuantizationType.Q8_0: ((0, 4e-4),),
}


def random_blocks(rows: int, inputs: int, kind: gguf.GGMLQuantizationType, rng: np.random.Generator) -> np.ndarray:
    """A weight ``[rows, inputs]`` of random blocks of a GGUF type (any bits are a valid block but the fp16
    scales, which are set): uint8 ``[rows, row bytes]``."""
    weights, size = gguf.GGML_QUANT_SIZES[kind]
    blocks = rng.integers(0, 256, (rows, inputs // weights, size), dtype=np.uint8)
    for offset, value in BLOCK_SCALES[kind]:
        scale = (rng.uniform(0.5, 1.5, (rows, inputs // weights)) * value).astype(np.float16)
        blocks[:, :, offset : offset + 2] = scale.view(np.uint8).reshape(rows, inputs // weights, 2)
    return blocks.reshape(rows, -1)


Q = gguf.GGMLQuantizationType
MIXED_TYPES = {  # every block format the decoder reads, in every place
    "token_embd": Q.Q8_0,
    "attn_q": Q.Q4_K,
    "attn_k": Q.Q6_K,
    "attn_v": Q.Q8_0,
    "attn_output": Q.Q5_0,
    "ffn_gate": Q.Q4_K,
    "ffn_up": Q.Q6_K,
    "ffn_down": Q.Q5_0,
    "output": Q.Q6_K,
}


def write_tiny_quantized_gguf(
    path: Path,
    architecture: str = "qwen2",
    seed: int = 0,
    types: dict[str, gguf.GGMLQuantizationType] | None = None,
    float_tensors: tuple[str, ...] = (),
    layers: int = 2,
) -> None:
    """Write a tiny model of ``architecture`` (``qwen2``: with q/k/v biases; ``llama``) whose weights are random
    blocks of the GGUF types ``types`` names (:data:`MIXED_TYPES` by default), as a quantized file stores them;
    the tensors named in ``float_tensors`` (``blk.1.ffn_down`` say) are F16 instead. Hidden size 256 (the K-quants'
    block), 4 heads of 64 over 2 kv heads, ``layers`` layers, the byte-level vocabulary and ChatML template above."""
    types = {**MIXED_TYPES, **(types or {})}
    rng = np.random.default_rng(seed)
    tokens = [*_byte_tokens(), "<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u0120t"]
    hidden, intermediate, heads, kv_heads = 256, 512, 4, 2
    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name(f"tiny-{architecture}-blocks")
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(intermediate)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3, 3, 3, 1])
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(257)
    w.add_eos_token_id(258)
    w.add_pad_token_id(256)
    w.add_chat_template(CHATML)

    def weight(name: str, rows: int, inputs: int) -> None:
        base = name.removesuffix(".weight").split(".")[-1]
        if name.removesuffix(".weight") in float_tensors:
            w.add_tensor(name, (rng.standard_normal((rows, inputs)) * 0.05).astype(np.float16))
        else:
            w.add_tensor(name, random_blocks(rows, inputs, types[base], rng), raw_dtype=types[base])

    def norm(name: str) -> None:
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))

    weight("token_embd.weight", len(tokens), hidden)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        weight(f"blk.{i}.attn_q.weight", heads * head_dim, hidden)
        weight(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        weight(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        if architecture == "qwen2":
            for part, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
                w.add_tensor(f"blk.{i}.attn_{part}.bias", (0.1 * rng.standard_normal(rows)).astype(np.float32))
        weight(f"blk.{i}.attn_output.weight", hidden, heads * head_dim)
        norm(f"blk.{i}.ffn_norm.weight")
        weight(f"blk.{i}.ffn_gate.weight", intermediate, hidden)
        weight(f"blk.{i}.ffn_up.weight", intermediate, hidden)
        weight(f"blk.{i}.ffn_down.weight", hidden, intermediate)
    norm("output_norm.weight")
    weight("output.weight", len(tokens), hidden)
    _finish(w)


class DequantizedLinear(torch.nn.Linear):
    """A block weight as fp32 by gguf's own code, keeping its format (what the kernel rounds inputs for)."""

    def __init__(self, blocks: BlockLinear) -> None:
        super().__init__(blocks.in_features, blocks.out_features, bias=blocks.bias is not None)
        self.format_id = blocks.format_id
        self.weight.data = dequantize(blocks.blocks, blocks.format_id)
        if blocks.bias is not None:
            self.bias.data = blocks.bias.float().clone()


def dequantized(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a model loaded as stored with each block weight a ``DequantizedLinear``: the eager reference
    (the model's own ``BlockLinear`` computes in our kernels' arithmetic)."""
    reference = copy.deepcopy(model)
    for name, module in list(reference.named_modules()):
        if isinstance(module, BlockLinear):
            parent, _, child = name.rpartition(".")
            setattr(reference.get_submodule(parent) if parent else reference, child, DequantizedLinear(module))
    return reference
