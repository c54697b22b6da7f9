"""Splitting files into parts and joining them with the standard library only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.bench.join_parts import MANIFEST, is_split, join_folder, main, split_folder


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "big.bin").write_bytes(os.urandom(2500))
    (tmp_path / "small.json").write_text('{"a": 1}')
    return tmp_path


def test_split_then_join_restores_every_byte(folder: Path) -> None:
    original = (folder / "big.bin").read_bytes()
    parts = split_folder(folder, 1000)
    assert [p.name for p in parts] == ["big.bin.part000", "big.bin.part001", "big.bin.part002"]
    assert [p.stat().st_size for p in parts] == [1000, 1000, 500]
    assert not (folder / "big.bin").exists() and (folder / "small.json").exists() and is_split(folder)
    assert main([str(folder)]) == 0
    assert (folder / "big.bin").read_bytes() == original
    assert sorted(p.name for p in folder.iterdir()) == ["big.bin", "small.json"]


def test_a_damaged_part_is_refused_and_the_parts_are_kept(folder: Path) -> None:
    split_folder(folder, 1000)
    part = folder / "big.bin.part001"
    part.write_bytes(bytes(1000))
    with pytest.raises(ValueError, match="damaged"):
        join_folder(folder)
    assert part.exists() and is_split(folder) and not (folder / "big.bin").exists()
    assert not list(folder.glob("*.joining"))


def test_a_missing_part_is_named(folder: Path, capsys) -> None:
    split_folder(folder, 1000)
    (folder / "big.bin.part002").unlink()
    assert main([str(folder)]) == 1
    assert "big.bin.part002" in capsys.readouterr().err


def test_nothing_to_split_or_join(folder: Path) -> None:
    assert split_folder(folder, 10_000) == [] and not is_split(folder)
    assert main([str(folder)]) == 0


def test_splitting_twice_is_refused(folder: Path) -> None:
    split_folder(folder, 1000)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["big.bin"]["size"] == 2500
    with pytest.raises(ValueError, match="already split"):
        split_folder(folder, 1000)
