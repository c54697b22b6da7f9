"""Python's cyclic garbage collector while a command starts, and when the process exits.

Importing torch and transformers and loading a model make a few hundred thousand objects that live
as long as the process, and every full collection walks all of them: while they are made (a few
collections, as their count grows) and once more when Python exits. Collecting nothing while a
command imports and loads, then freezing what is alive (``gc.freeze``: later collections skip those
objects, reference counting still frees them), takes that walk out of every start and exit
(docs/performance.md, "Warm start and first start").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collecting_after() -> Iterator[None]:
    """Run the block without cyclic collections; then freeze every object alive, and collect as before.

    For start-up work whose objects stay (imports, a model, its prepared step), not for work that
    leaves garbage behind in cycles: frozen cycles are never collected.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def freeze_for_exit() -> None:
    """Before the process exits: Python's last collection then skips what is alive now."""
    gc.freeze()
