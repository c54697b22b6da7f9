"""Split big files of a folder into parts and join them again, with Python's standard library only.

A model folder too big to carry in one transfer is split into ``NAME.partNNN`` files of at most
``max_bytes`` each, described by ``parts.json`` (sizes and sha256 of the whole files). On the other
side ``python -m core.bench.join_parts DIR`` (or ``gpu_check --model DIR``) joins them back and
checks every checksum. This module imports nothing beyond the standard library.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

MANIFEST = "parts.json"
_BLOCK = 1 << 20


def _part_name(name: str, index: int) -> str:
    return f"{name}.part{index:03d}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def split_folder(folder: Path, max_bytes: int) -> list[Path]:
    """Split every file of ``folder`` larger than ``max_bytes`` into parts; return the parts written.

    The original files are removed once their parts and the manifest are written.
    """
    if max_bytes < 1:
        raise ValueError(f"The part size must be at least one byte (got {max_bytes}).")
    if (folder / MANIFEST).exists():
        raise ValueError(f"{folder} is already split ({MANIFEST} exists): join it first.")
    manifest: dict[str, dict[str, object]] = {}
    written: list[Path] = []
    for file in sorted(p for p in folder.iterdir() if p.is_file() and p.stat().st_size > max_bytes):
        parts: list[str] = []
        with file.open("rb") as src:
            while chunk := src.read(max_bytes):
                part = folder / _part_name(file.name, len(parts))
                part.write_bytes(chunk)
                parts.append(part.name)
                written.append(part)
        manifest[file.name] = {"size": file.stat().st_size, "sha256": _sha256(file), "parts": parts}
    if manifest:
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        for name in manifest:
            (folder / name).unlink()
    return written


def is_split(folder: Path) -> bool:
    """True when ``folder`` holds parts still to be joined."""
    return (folder / MANIFEST).is_file()


def join_folder(folder: Path) -> list[Path]:
    """Join the parts that ``parts.json`` lists, verify sizes and checksums, remove the parts.

    Raises:
        ValueError: a part is missing, or a joined file has the wrong size or checksum (nothing
            is removed then, so the transfer can be repeated for the parts at fault).
    """
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    joined: list[Path] = []
    for name, entry in manifest.items():
        missing = [p for p in entry["parts"] if not (folder / p).is_file()]
        if missing:
            raise ValueError(
                f"{folder}: {len(missing)} part(s) of {name} are missing ({', '.join(missing)}); copy them over and join again."
            )
        target = folder / name
        partial = folder / (name + ".joining")
        with partial.open("wb") as out:
            for part in entry["parts"]:
                with (folder / part).open("rb") as src:
                    while block := src.read(_BLOCK):
                        out.write(block)
        size, digest = partial.stat().st_size, _sha256(partial)
        if size != entry["size"] or digest != entry["sha256"]:
            partial.unlink()
            raise ValueError(
                f"{folder}: joining {name} gave {size} bytes with sha256 {digest[:12]}..., expected {entry['size']} "
                f"bytes with {entry['sha256'][:12]}...: a part is damaged or from another export; copy the parts again."
            )
        partial.replace(target)
        joined.append(target)
    for entry in manifest.values():
        for part in entry["parts"]:
            (folder / part).unlink()
    (folder / MANIFEST).unlink()
    return joined


def main(argv: list[str] | None = None) -> int:
    """``python -m core.bench.join_parts DIR``: join DIR's parts in place."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m core.bench.join_parts DIR", file=sys.stderr)
        return 2
    folder = Path(args[0])
    if not is_split(folder):
        print(f"{folder} has no {MANIFEST}: nothing to join.")
        return 0
    try:
        joined = join_folder(folder)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"Joined {len(joined)} file(s) in {folder}: {', '.join(p.name for p in joined)}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
