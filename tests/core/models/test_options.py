"""Model sources and load options: parsing command-line specs, validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.models.options import LoadOptions, ModelSource, source_from_spec


def test_source_from_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local-model").mkdir()
    (tmp_path / "org" / "name").mkdir(parents=True)  # exists locally: a folder, not a repo id
    assert source_from_spec("default") == ModelSource()
    assert source_from_spec("models/x.gguf") == ModelSource("gguf", "models/x.gguf")
    assert source_from_spec("X.GGUF").kind == "gguf"
    assert source_from_spec("~/m.gguf") == ModelSource("gguf", str(Path.home() / "m.gguf"))
    assert source_from_spec("HuggingFaceTB/SmolLM2-135M-Instruct") == ModelSource(
        "hub", "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    assert source_from_spec("org/name") == ModelSource("folder", "org/name")
    assert source_from_spec("local-model") == ModelSource("folder", "local-model")
    assert source_from_spec("./a/b") == ModelSource("folder", "a/b")
    assert source_from_spec("/abs/path") == ModelSource("folder", "/abs/path")
    assert source_from_spec("a/b/c") == ModelSource("folder", "a/b/c")
    assert source_from_spec("C:\\models\\m").kind == "folder"


def test_source_validation_and_names() -> None:
    with pytest.raises(ValueError, match="Unknown model source 'ftp'"):
        ModelSource("ftp", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a location"):
        ModelSource("folder", "  ")
    with pytest.raises(ValueError, match="must be text"):
        ModelSource("hub", 5)  # type: ignore[arg-type]
    assert ModelSource().display_name == "SmolLM2-135M-Instruct"
    assert ModelSource("hub", "owner/name/").display_name == "name"
    assert ModelSource("gguf", "/m/Llama-3.Q4.gguf").display_name == "Llama-3.Q4"
    assert ModelSource("folder", "/m/my-model").display_name == "my-model"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"device": "tpu"}, "Invalid device 'tpu'; use one of auto, cuda, cpu."),
        ({"dtype": "int8"}, "Invalid dtype 'int8'"),
        ({"quantization": "3bit"}, "Invalid quantization '3bit'"),
        (
            {"attn_implementation": "flash_attention_2"},
            "Invalid attention 'flash_attention_2'; use one of sdpa, eager.",
        ),
    ],
)
def test_load_options_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        LoadOptions(**kwargs)
    assert str(err.value).startswith(message)


def test_load_options_defaults() -> None:
    o = LoadOptions()
    assert (o.device, o.dtype, o.quantization, o.attn_implementation) == ("auto", "auto", "auto", "sdpa")
