"""The registry of known models: add, remove, list with availability; a damaged file is survivable."""

from __future__ import annotations

import json
from pathlib import Path

from core.models.hub import hub_model_dir
from core.models.options import ModelSource
from core.models.registry import REGISTRY_FILE, ModelRegistry
from core.paths import AppPaths


def _paths(tmp_path: Path) -> AppPaths:
    return AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache").ensure()


def test_default_is_always_first(tmp_path: Path) -> None:
    known = ModelRegistry(_paths(tmp_path)).known()
    assert [k.source for k in known] == [ModelSource()]
    assert known[0].name == "SmolLM2-135M-Instruct"
    assert known[0].available is False  # this cache is empty


def test_default_available_when_cached(app_paths: AppPaths, default_model_folder: Path) -> None:
    assert ModelRegistry(app_paths).known()[0].available


def test_add_remove_known_and_persisted(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    folder = tmp_path / "my-model"
    folder.mkdir()
    gguf = ModelSource("gguf", str(tmp_path / "gone.gguf"))
    hub = ModelSource("hub", "owner/some-model")
    registry = ModelRegistry(paths)
    registry.add(ModelSource("folder", str(folder)))
    registry.add(gguf)
    registry.add(hub)
    registry.add(gguf)  # a duplicate is ignored
    registry.add(ModelSource())  # the default is never stored
    again = ModelRegistry(paths)  # a fresh instance reads the file
    assert again.sources() == [ModelSource("folder", str(folder)), gguf, hub]
    known = {k.source: k for k in again.known()}
    assert known[ModelSource("folder", str(folder))].available
    assert not known[gguf].available  # the file is not there
    assert not known[hub].available  # not downloaded
    assert [k.name for k in again.known()][1:] == ["my-model", "gone", "some-model"]
    hub_folder = hub_model_dir("owner/some-model", paths.models_dir)
    hub_folder.mkdir(parents=True)
    (hub_folder / "config.json").write_text("{}")
    assert {k.source: k for k in again.known()}[hub].available
    again.remove(gguf)
    again.remove(ModelSource("hub", "never/added"))  # removing an unknown model is harmless
    assert ModelRegistry(paths).sources() == [ModelSource("folder", str(folder)), hub]
    assert json.loads((paths.data_dir / REGISTRY_FILE).read_text())[1] == {
        "kind": "hub",
        "location": "owner/some-model",
    }


def test_damaged_registry_is_ignored(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    for text in ("{not json", '[{"kind": "spaceship", "location": "x"}]', '[{"kind": "folder"}]', "42"):
        (paths.data_dir / REGISTRY_FILE).write_text(text)
        registry = ModelRegistry(paths)
        assert registry.sources() == [], text
        assert [k.source for k in registry.known()] == [ModelSource()]
    registry.add(ModelSource("hub", "a/b"))  # and a new add rewrites it cleanly
    assert ModelRegistry(paths).sources() == [ModelSource("hub", "a/b")]
