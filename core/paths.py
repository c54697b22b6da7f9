"""Where the app keeps its files: config, data (chats, registry, profiles) and the model cache."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "lookahead-chat"
HOME_VARIABLE = "LOOKAHEAD_CHAT_HOME"
CACHE_VARIABLE = "LOOKAHEAD_CHAT_CACHE"
COMPILE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
"""Where torch's compiler keeps its code; the compiled steps and our kernels go there too."""


class AppFolderError(OSError):
    """A folder of the app cannot be created; ``str(err)`` says why and what to do."""


@dataclass(frozen=True)
class AppPaths:
    """The three per-user folders of the app.

    ``LOOKAHEAD_CHAT_HOME`` puts config and data under one folder (tests, portable installs);
    ``LOOKAHEAD_CHAT_CACHE`` moves the model cache. ``calibration`` moves Auto's measurements
    (tests): by default they live in the cache with the compiled steps they go with, so a new data
    folder on the same machine does not measure again.
    """

    config_dir: Path
    data_dir: Path
    cache_dir: Path
    calibration: Path | None = None

    @classmethod
    def default(cls) -> AppPaths:
        home = os.environ.get(HOME_VARIABLE)
        cache = os.environ.get(CACHE_VARIABLE)
        cache_dir = Path(cache) if cache else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
        if home:
            return cls(Path(home) / "config", Path(home) / "data", cache_dir)
        return cls(
            Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
            cache_dir,
        )

    @property
    def models_dir(self) -> Path:
        """Converted and downloaded models."""
        return self.cache_dir / "models"

    @property
    def compile_dir(self) -> Path:
        """Compiled decoding steps and our kernels (torch's compiler cache, :data:`COMPILE_VARIABLE`)."""
        return self.cache_dir / "inductor"

    def use_compile_dir(self) -> None:
        """Point torch's compiler at :attr:`compile_dir`, unless the user chose a folder: once, as the app starts
        (before torch's compiler loads and writes its own default, a temporary folder, which counts as not
        chosen). The compiled code then outlives reboots."""
        chosen = os.environ.get(COMPILE_VARIABLE)
        if chosen is None or chosen == _torch_default_compile_dir():
            os.environ[COMPILE_VARIABLE] = str(self.compile_dir)

    @property
    def calibration_dir(self) -> Path:
        """Auto's calibration files, one per machine set-up (``core.autotune.store``)."""
        return self.calibration or self.cache_dir / "calibration"

    def ensure(self) -> AppPaths:
        """Create the folders if they are missing; returns self.

        Raises:
            AppFolderError: one cannot be created (a file in the way, no permission).
        """
        for folder in (self.config_dir, self.data_dir, self.cache_dir):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise AppFolderError(_folder_problem(folder, err)) from err
        return self


def _folder_problem(folder: Path, err: OSError) -> str:
    """Why ``folder`` could not be created and what to do, in one line."""
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    reason = f"{blocker} is a file, not a folder" if blocker else (err.strerror or str(err)).lower()
    variable = next(
        (v for v in (HOME_VARIABLE, CACHE_VARIABLE) if os.environ.get(v) and folder.is_relative_to(os.environ[v])),
        None,
    )
    if variable:
        todo = f"Point {variable} at a folder{'' if blocker else ' you can write to'}, or unset it."
    else:
        todo = f"Move that file, or set {HOME_VARIABLE} to another folder." if blocker else "Check the permissions."
    return f"Lookahead Chat cannot create its folder {folder}: {reason}. {todo}"


def _torch_default_compile_dir() -> str | None:
    """The folder torch picks by itself, where its cache-folder module has loaded (only it sets one)."""
    module = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    return None if module is None else os.path.abspath(module.default_cache_dir())


def resource_path(*parts: str) -> Path:
    """Path of a file under ``resources/``, from a source tree or a PyInstaller bundle."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if bundle else Path(__file__).resolve().parents[1]
    return root.joinpath("resources", *parts)
