"""Hub downloads: with no network (this machine has none) a clear OfflineError comes at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.models import LoadOptions, ModelNotFoundError, ModelSource, OfflineError, load_model
from core.models.hub import download_hub_model, hub_model_dir
from core.paths import AppPaths

ROOT = Path(__file__).resolve().parents[3]
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _hub_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module", autouse=True)
def _offline_machine() -> None:
    if _hub_reachable():
        pytest.skip("huggingface.co is reachable from this machine, so the offline error cannot be provoked")


def test_no_network_raises_offline_error_quickly(tmp_path: Path) -> None:
    start = time.perf_counter()
    with pytest.raises(OfflineError, match="Could not reach the model hub") as err:
        download_hub_model(REPO, tmp_path / "models")
    assert time.perf_counter() - start < 30
    assert REPO in err.value.what and "network" in err.value.todo
    assert not (hub_model_dir(REPO, tmp_path / "models") / "config.json").exists()


def test_no_network_through_load_model(tmp_path: Path) -> None:
    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "cache").ensure()
    fractions: list[float] = []
    with pytest.raises(OfflineError):
        load_model(ModelSource("hub", REPO), LoadOptions(device="cpu"), paths, lambda s, f: fractions.append(f))
    assert fractions and fractions[0] == 0.0  # the download stage was reported before failing


def test_hf_hub_offline_is_overridden_for_the_explicit_download(tmp_path: Path) -> None:
    """With HF_HUB_OFFLINE=1 the download still tries the network (and fails with OfflineError), then restores it."""
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from pathlib import Path\n"
        "from huggingface_hub import constants\n"
        "from core.models.hub import download_hub_model\n"
        "from core.models import OfflineError\n"
        "start = time.perf_counter()\n"
        "try:\n"
        f"    download_hub_model({REPO!r}, Path(sys.argv[2]))\n"
        "except OfflineError as err:\n"
        "    cause = repr(err.__cause__)\n"
        "    print('OFFLINE', round(time.perf_counter() - start, 1), constants.HF_HUB_OFFLINE, cause)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), str(tmp_path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout.startswith("OFFLINE"), proc.stdout + proc.stderr[-2000:]
    _, seconds, restored, cause = proc.stdout.split(" ", 3)
    assert float(seconds) < 30
    assert restored == "True"  # the user's offline setting is back after the download
    assert "HF_HUB_OFFLINE=0" not in cause and "OfflineModeIsEnabled" not in cause  # the network was really tried


@pytest.mark.parametrize("repo_id", ["not a repo id!!", "a/b/c"])
def test_invalid_repo_id(repo_id: str, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not a valid hub repo id"):
        download_hub_model(repo_id, tmp_path)


def test_already_downloaded_hub_model_loads_offline(tiny_model_folder: Path, tmp_path: Path) -> None:
    import shutil

    paths = AppPaths(tmp_path / "c", tmp_path / "d", tmp_path / "cache").ensure()
    shutil.copytree(tiny_model_folder, hub_model_dir("owner/tiny-llama", paths.models_dir))
    loaded = load_model(ModelSource("hub", "owner/tiny-llama"), LoadOptions(device="cpu", dtype="fp32"), paths)
    assert loaded.name == "tiny-llama" and type(loaded.model).__name__ == "LlamaForCausalLM"
