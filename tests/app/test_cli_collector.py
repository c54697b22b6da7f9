"""The command line's start-up without cyclic collections, and what it freezes for the exit."""

from __future__ import annotations

import gc

from app.cli.collector import collecting_after, freeze_for_exit


def test_start_up_collects_nothing_then_later_collections_skip_what_it_made() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with collecting_after():
        assert not gc.isenabled()
        made = [[index] for index in range(1000)]  # lists: objects the collector tracks
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(made)


def test_a_collector_turned_off_stays_off() -> None:
    """The window collects on its own timer (app.window.gc_guard) with automatic collection off."""
    gc.disable()
    try:
        with collecting_after():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_exit_freezes_what_is_alive() -> None:
    alive = [[index] for index in range(100)]
    gc.unfreeze()
    freeze_for_exit()
    assert gc.get_freeze_count() >= len(alive)
