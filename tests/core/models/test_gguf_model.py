"""A GGUF model with its weights as the file stores them: the same model transformers dequantizes, the
metadata kept for the next load, clear errors, and the loader's choice of this path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from gguf import GGUFReader

from core.models.errors import CorruptModelError, UnsupportedArchitectureError
from core.models.gguf_file import converted_gguf_dir
from core.models.gguf_index import read_index
from core.models.gguf_model import load_gguf_model, metadata_dir
from core.models.loader import load_model
from core.models.options import LoadOptions, ModelSource
from core.runtime.compiled import kernels
from core.runtime.weights.blocks import BlockEmbedding, BlockLinear
from tests.core.models.tiny_gguf import dequantized, write_metadata_gguf, write_tiny_quantized_gguf


def transformers_model(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_the_blocks_make_the_model_transformers_dequantizes(tmp_path: Path, architecture: str) -> None:
    """Every tensor in its place (llama's permuted q and k rows put back, qwen2's biases), each weight a view of
    the file's blocks: the model's logits are transformers' own for the same file."""
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path, architecture)
    built = load_gguf_model(path, tmp_path / "cache")
    assert set(built.formats) == {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}
    model = built.model
    assert isinstance(model.model.embed_tokens, BlockEmbedding) and isinstance(model.lm_head, BlockLinear)
    index = read_index(path)
    v = model.model.layers[0].self_attn.v_proj
    stored = index.bytes_of(index.tensors["blk.0.attn_v.weight"])
    assert v.blocks.numpy().tobytes() == stored.tobytes()
    ids = torch.randint(0, 260, (1, 19), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = dequantized(model)(ids).logits, transformers_model(path)(ids).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_a_weight_of_another_type_is_kept_as_int8(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path, float_tensors=("blk.1.ffn_down",))
    built = load_gguf_model(path, tmp_path / "cache")
    assert "int8" in built.formats and type(built.model.model.layers[1].mlp.down_proj).__name__ == "Int8WeightLinear"
    ids = torch.randint(0, 260, (1, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, theirs = built.model(ids).logits, transformers_model(path)(ids).logits
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    assert (ours - theirs).abs().max() < 0.02 * theirs.abs().max()


def test_the_configuration_and_tokenizer_are_kept_for_the_next_load(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path)
    first = load_gguf_model(path, tmp_path / "cache")
    assert (metadata_dir(path, tmp_path / "cache") / "done").is_file()
    again = load_gguf_model(path, tmp_path / "cache")
    text = [{"role": "user", "content": "tot"}]
    assert first.tokenizer.apply_chat_template(text) == again.tokenizer.apply_chat_template(text)
    kept, read = again.model.config.to_dict(), first.model.config.to_dict()
    assert {k: v for k, v in kept.items() if k != "_name_or_path"} == {
        k: v for k, v in read.items() if k != "_name_or_path"
    }
    assert again.model.generation_config.eos_token_id == 258


def test_the_index_is_ggufs_own(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path)
    index, reader = read_index(path), GGUFReader(str(path))
    assert index.architecture == "qwen2" and len(index.tensors) == len(reader.tensors)
    for tensor in reader.tensors:
        ours = index.tensors[tensor.name]
        assert ours.tensor_type == int(tensor.tensor_type) and ours.shape == tuple(int(d) for d in tensor.shape)
        assert index.bytes_of(ours).tobytes() == tensor.data.tobytes()


def test_a_truncated_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptModelError, match="damaged or truncated"):
        load_gguf_model(path, tmp_path / "cache")


def test_another_architecture_is_not_read_as_stored(tmp_path: Path) -> None:
    path = tmp_path / "other.gguf"
    write_metadata_gguf(path, "gpt2")
    with pytest.raises(UnsupportedArchitectureError):
        load_gguf_model(path, tmp_path / "cache")


@pytest.mark.skipif(not kernels.supported(), reason="the int8 decoder needs an x86-64 processor with AVX2")
def test_the_loader_runs_a_gguf_file_on_the_int8_decoder_from_the_first_step(tmp_path: Path, app_paths) -> None:
    """dtype and quantization auto on the CPU: the weights as stored, no converted copy in the model cache, and
    the decoder attached at load (no eager first answer); 8bit: the file's weights rounded to int8, in the same
    decoder; no quantization: transformers' dequantized model."""
    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path)
    loaded = load_model(ModelSource("gguf", str(path)), LoadOptions(), app_paths)
    assert loaded.prepared.compiled is not None and loaded.prepared.compiled.decoder is not None
    assert loaded.quantization == "Q6_K/Q5_0/Q4_K/Q8_0"  # most bytes first
    converted = converted_gguf_dir(path, app_paths.models_dir)
    assert not converted.exists()
    int8 = load_model(ModelSource("gguf", str(path)), LoadOptions(quantization="8bit"), app_paths)
    assert int8.quantization == "int8" and int8.prepared.compiled.decoder.formats == ("int8",)
    try:
        dequantized = load_model(ModelSource("gguf", str(path)), LoadOptions(quantization="none"), app_paths)
        assert dequantized.quantization == "none" and dequantized.prepared.compiled is None
    finally:  # the models folder is the shared cache's: the converted copy goes
        shutil.rmtree(converted, ignore_errors=True)


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_the_configuration_and_tokenizer_are_transformers_own(tmp_path: Path, architecture: str) -> None:
    """Read from the file's metadata without transformers' whole-file reader: the same configuration and the
    same tokens and chat template as transformers' own GGUF load."""
    from transformers import AutoConfig, AutoTokenizer

    path = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(path, architecture)
    built = load_gguf_model(path, tmp_path / "cache")
    theirs = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name).to_dict()
    ours = built.model.config.to_dict()
    different = {
        k: (ours.get(k), v)
        for k, v in theirs.items()
        if ours.get(k) != v and k not in ("_name_or_path", "_model_name_or_path", "dtype")
    }
    assert not different
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = [{"role": "user", "content": "tot tt"}]
    assert built.tokenizer.apply_chat_template(text) == tokenizer.apply_chat_template(text)
    assert built.tokenizer.eos_token == tokenizer.eos_token and built.tokenizer.bos_token == tokenizer.bos_token
