"""Where the app keeps its files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from core.atomic import write_json_atomic, write_text_atomic
from core.paths import APP_NAME, COMPILE_VARIABLE, AppFolderError, AppPaths, resource_path


def test_home_and_cache_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOOKAHEAD_CHAT_CACHE", str(tmp_path / "cache"))
    paths = AppPaths.default()
    assert paths == AppPaths(tmp_path / "home" / "config", tmp_path / "home" / "data", tmp_path / "cache")
    assert paths.models_dir == tmp_path / "cache" / "models"
    assert not paths.config_dir.exists()
    assert paths.ensure() is paths
    assert all(p.is_dir() for p in (paths.config_dir, paths.data_dir, paths.cache_dir))
    paths.ensure()  # idempotent


def test_platform_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    monkeypatch.delenv("LOOKAHEAD_CHAT_HOME", raising=False)
    monkeypatch.delenv("LOOKAHEAD_CHAT_CACHE", raising=False)
    paths = AppPaths.default()
    assert paths.config_dir == Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))
    assert paths.data_dir == Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    assert paths.cache_dir == Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
    assert len({paths.config_dir, paths.data_dir, paths.cache_dir}) == 3
    assert all(APP_NAME in str(p) for p in (paths.config_dir, paths.data_dir, paths.cache_dir))


def test_cache_override_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOKAHEAD_CHAT_HOME", raising=False)
    monkeypatch.setenv("LOOKAHEAD_CHAT_CACHE", str(tmp_path))
    assert AppPaths.default().cache_dir == tmp_path


def test_resource_path_source_tree_and_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[2]
    assert resource_path("themes", "dark.qss") == root / "resources" / "themes" / "dark.qss"
    assert resource_path().is_dir()
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert resource_path("icons", "app.png") == tmp_path / "resources" / "icons" / "app.png"


def test_atomic_writes(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    write_json_atomic(target, {"a": [1, 2]})
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    write_text_atomic(target, "ünïcode")
    assert target.read_text(encoding="utf-8") == "ünïcode"
    with pytest.raises(TypeError):
        write_json_atomic(target, {"x": object()})  # fails while serialising: the old file stays
    assert target.read_text(encoding="utf-8") == "ünïcode"
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, "half \ud800 written")  # fails while writing the temp file
    assert target.read_text(encoding="utf-8") == "ünïcode"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]  # no temp file left


def test_a_file_in_the_way_of_a_folder_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LOOKAHEAD_CHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOOKAHEAD_CHAT_CACHE", str(blocker))  # the folder itself is the file
    with pytest.raises(AppFolderError) as err:
        AppPaths.default().ensure()
    assert str(err.value) == (
        f"Lookahead Chat cannot create its folder {blocker}: {blocker} is a file, not a folder. "
        "Point LOOKAHEAD_CHAT_CACHE at a folder, or unset it."
    )
    monkeypatch.delenv("LOOKAHEAD_CHAT_HOME")
    monkeypatch.delenv("LOOKAHEAD_CHAT_CACHE")
    with pytest.raises(AppFolderError, match="Move that file, or set LOOKAHEAD_CHAT_HOME to another folder"):
        AppPaths(blocker / "config", tmp_path / "data", tmp_path / "c").ensure()
    assert blocker.read_text() == "not a folder"


def test_the_compile_folder_replaces_the_temporary_folder_torch_sets_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    paths = AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache")
    monkeypatch.delenv(COMPILE_VARIABLE)
    cache_dir()  # what loading torch's compiler does (importing a transformers model loads it)
    assert os.environ[COMPILE_VARIABLE] == os.path.abspath(default_cache_dir())
    paths.use_compile_dir()
    assert os.environ[COMPILE_VARIABLE] == str(tmp_path / "cache" / "inductor") == str(paths.compile_dir)
    chosen = str(tmp_path / "chosen")
    monkeypatch.setenv(COMPILE_VARIABLE, chosen)  # a user's own folder stays
    AppPaths(tmp_path, tmp_path, tmp_path / "other").use_compile_dir()
    assert os.environ[COMPILE_VARIABLE] == chosen
