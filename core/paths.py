"""Where the app keeps its files: config, data (chats, registry, profiles) and the model cache."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "lookahead-chat"


@dataclass(frozen=True)
class AppPaths:
    """The three per-user folders of the app.

    ``LOOKAHEAD_CHAT_HOME`` puts config and data under one folder (tests, portable installs);
    ``LOOKAHEAD_CHAT_CACHE`` moves the model cache.
    """

    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @classmethod
    def default(cls) -> AppPaths:
        home = os.environ.get("LOOKAHEAD_CHAT_HOME")
        cache = os.environ.get("LOOKAHEAD_CHAT_CACHE")
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

    def ensure(self) -> AppPaths:
        """Create the folders if they are missing; returns self."""
        for folder in (self.config_dir, self.data_dir, self.cache_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self


def resource_path(*parts: str) -> Path:
    """Path of a file under ``resources/``, from a source tree or a PyInstaller bundle."""
    bundle = getattr(sys, "_MEIPASS", None)
    root = Path(bundle) if bundle else Path(__file__).resolve().parents[1]
    return root.joinpath("resources", *parts)
