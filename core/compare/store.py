"""Comparisons kept with their conversation: JSON files under data_dir/comparisons/<conversation>/."""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.atomic import write_json_atomic
from core.compare.export import comparison_json
from core.compare.record import Comparison

log = logging.getLogger(__name__)

UNFILED = "_unfiled"  # comparisons made outside any conversation


@dataclass(frozen=True)
class StoredComparison:
    """A saved comparison as a list shows it."""

    path: Path
    created: str
    prompt: str
    lookahead: str
    speedup: float | None
    identical: bool | None

    @property
    def title(self) -> str:
        prompt = " ".join(self.prompt.split())
        prompt = prompt if len(prompt) <= 48 else prompt[:47] + "\u2026"
        speed = f"{self.speedup:.2f}x" if self.speedup is not None else "stopped"
        return f"{self.created.replace('T', ' ')[:16]} \u00b7 {speed} \u00b7 {prompt}"


class ComparisonStore:
    """Saves, lists and loads comparisons per conversation id (any string; ``None`` means none)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "comparisons"

    def folder(self, conversation_id: str | None) -> Path:
        if conversation_id is None:
            return self.root / UNFILED
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(conversation_id)).lstrip(".")
        return self.root / (safe or UNFILED)

    def save(self, comparison: Comparison) -> Path:
        """Write ``comparison`` (atomically) into its conversation's folder; returns the file."""
        stamp = re.sub(r"[^0-9]", "", comparison.created)
        path = self.folder(comparison.conversation_id) / f"{stamp}-{comparison.id}.json"
        write_json_atomic(path, comparison_json(comparison))
        return path

    def list(self, conversation_id: str | None) -> list[StoredComparison]:
        """The conversation's comparisons, newest first; unreadable files are skipped and logged."""
        entries: list[StoredComparison] = []
        for path in sorted(self.folder(conversation_id).glob("*.json"), reverse=True):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                summary = data.get("summary") or {}
                entries.append(
                    StoredComparison(
                        path,
                        str(data["created"]),
                        str(data["prompt"]),
                        str(data["lookahead"]),
                        summary.get("speedup", {}).get("median"),
                        summary.get("identical"),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                log.warning("Skipping the unreadable comparison %s: %s", path, err)
        return entries

    def load(self, path: Path) -> Comparison:
        """Read a saved comparison; raises ValueError with the file's name when it is unusable."""
        try:
            return Comparison.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as err:
            raise ValueError(f"The comparison {path.name} could not be read: {err}") from err

    def delete_conversation(self, conversation_id: str) -> None:
        """Remove every comparison of a conversation (call when the conversation is deleted)."""
        shutil.rmtree(self.folder(conversation_id), ignore_errors=True)
