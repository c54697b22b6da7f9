"""The registry of known local models (a JSON file in the data dir): what the user can pick."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from core.atomic import write_json_atomic
from core.models.default_model import is_default_model_ready
from core.models.hub import hub_model_dir
from core.models.options import ModelSource
from core.paths import AppPaths

log = logging.getLogger(__name__)

REGISTRY_FILE = "models.json"


@dataclass(frozen=True)
class KnownModel:
    source: ModelSource
    available: bool  # on this computer now (downloaded, file or folder present)

    @property
    def name(self) -> str:
        return self.source.display_name


class ModelRegistry:
    """Remembers the models the user added; the embedded default is always listed first."""

    def __init__(self, paths: AppPaths) -> None:
        self.paths = paths
        self.path = paths.data_dir / REGISTRY_FILE

    def sources(self) -> list[ModelSource]:
        """The registered sources (without the default), oldest first."""
        if not self.path.exists():
            return []
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            return [ModelSource(e["kind"], e["location"]) for e in entries]
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("ignoring unreadable model registry %s: %s", self.path, err)
            return []

    def known(self) -> list[KnownModel]:
        """Every model the user can choose, with whether it is on this computer."""
        found = [KnownModel(ModelSource(), is_default_model_ready(self.paths))]
        found += [KnownModel(s, self._available(s)) for s in self.sources()]
        return found

    def add(self, source: ModelSource) -> None:
        if source.kind == "default" or source in self.sources():
            return
        self._write([*self.sources(), source])

    def remove(self, source: ModelSource) -> None:
        self._write([s for s in self.sources() if s != source])

    def _available(self, source: ModelSource) -> bool:
        if source.kind == "hub":
            return (hub_model_dir(source.location, self.paths.models_dir) / "config.json").is_file()
        return Path(source.location).expanduser().exists()

    def _write(self, sources: list[ModelSource]) -> None:
        write_json_atomic(self.path, [{"kind": s.kind, "location": s.location} for s in sources])
