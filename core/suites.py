"""Benchmark prompt suites stored in resources/bench/*.json (one user turn or several per prompt)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from core.paths import resource_path

DEFAULT_SUITES = ("code", "chat", "math")


@dataclass(frozen=True)
class BenchPrompt:
    """One benchmark conversation: the user's turns, answered one after the other."""

    turns: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    prompts: tuple[BenchPrompt, ...]


def available_suites() -> list[str]:
    """Names of the suites shipped in resources/bench."""
    return sorted(p.stem for p in resource_path("bench").glob("*.json"))


def load_suite(name: str, limit: int = 0) -> Suite:
    """Load a suite by name; ``limit`` > 0 keeps only its first prompts."""
    path = resource_path("bench", f"{name}.json")
    if not path.is_file():
        raise ValueError(f"No benchmark suite '{name}'. Available: {', '.join(available_suites())}.")
    data = json.loads(path.read_text(encoding="utf-8"))
    prompts = tuple(BenchPrompt(tuple(p["turns"])) for p in data["prompts"])
    return Suite(data["name"], data.get("description", ""), prompts[:limit] if limit > 0 else prompts)
