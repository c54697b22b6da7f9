"""Host synchronisation in the steady-state decode loop (CUDA): which lines wait for the GPU, how often.

Two kinds are counted over a few steps after the prefill and a warm-up:

- implicit syncs, reported by ``torch.cuda.set_sync_debug_mode("warn")``: device-to-host reads
  (``.tolist()``, ``int(tensor)``, ``.item()``) and blocking host-to-device copies
  (``torch.tensor(list, device="cuda")``); each warning carries the Python line that caused it;
- explicit ``torch.cuda.synchronize()`` calls (the debug mode does not report those), counted by
  wrapping the function for the duration of the probe.
"""

from __future__ import annotations

import linecache
import sys
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.lookahead import Decoding, LookaheadConfig

_ROOT = str(Path(__file__).resolve().parents[3])


@dataclass
class SyncSite:
    kind: str  # "implicit" (sync debug mode) or "synchronize" (an explicit call)
    where: str  # file:line, with the callers for explicit calls
    code: str
    per_step: float


@dataclass
class SyncReport:
    mode: str
    steps: int
    debug_mode: bool  # False on the CPU: only the loop ran
    sites: list[SyncSite] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _short(path: str) -> str:
    if path.startswith(_ROOT):
        return path[len(_ROOT) + 1 :]
    marker = "site-packages/"
    return path.split(marker, 1)[1] if marker in path else path


def _site(path: str, line: int) -> tuple[str, str]:
    return f"{_short(path)}:{line}", linecache.getline(path, line).strip()


def probe_syncs(
    model: Any, prompt: list[int], config: LookaheadConfig | None, warmup: int = 3, steps: int = 8
) -> SyncReport:
    """Count the host syncs of ``steps`` decoding steps (plain when ``config`` is None)."""
    ngram = config.ngram if config else 1
    decoding = Decoding(model, prompt, lookahead=config, max_new_tokens=(2 + warmup + steps) * ngram)
    iterator = iter(decoding)
    for _ in range(1 + warmup):
        next(iterator)
    cuda = model.device.type == "cuda"
    explicit: Counter[tuple[str, str]] = Counter()
    original = torch.cuda.synchronize

    def counting(*args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        chain = []
        while frame is not None and len(chain) < 3:
            chain.append(f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
            frame = frame.f_back
        caller = sys._getframe(1)
        explicit[(" <- ".join(chain), linecache.getline(caller.f_code.co_filename, caller.f_lineno).strip())] += 1
        original(*args, **kwargs)

    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.synchronize = counting
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                next(iterator)
                done += 1
        except StopIteration:
            pass
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize = original
    iterator.close()
    implicit = Counter(_site(w.filename, w.lineno) for w in caught if "synchroniz" in str(w.message))
    report = SyncReport(config.label if config else "plain", done, cuda)
    per = max(done, 1)
    report.sites += [SyncSite("implicit", where, code, n / per) for (where, code), n in implicit.most_common()]
    report.sites += [SyncSite("synchronize", where, code, n / per) for (where, code), n in explicit.most_common()]
    return report
