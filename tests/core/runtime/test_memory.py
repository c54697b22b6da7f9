"""The computer's memory, which weight copies and layouts must leave room in."""

from __future__ import annotations

from core.runtime.memory import system_memory


def test_this_computers_memory_is_read() -> None:
    memory = system_memory()
    assert memory is not None and 0 < memory.available <= memory.total  # Linux here (and in CI)
