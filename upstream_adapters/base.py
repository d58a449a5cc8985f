"""The contract every source adapter fulfils, and the small helpers they share.

An adapter is a plain object (no Dagster) constructed with its options from `configs/sources.yaml`:

    adapter = get_adapter("gm100", camera="camera_top")
    unit_ids = adapter.discover(root)                  # sorted, deterministic; SourceError if the root is unusable
    ir = adapter.read_unit(root, unit_id)              # UnitIR; UnitError(reason, file) if this unit is unreadable
    frames = adapter.read_frames(root, unit_id, camera, [3, 10, 57])   # {index: HxWx3 RGB uint8}

`read_frames` raises UnitError when the storage cannot be opened or an index does not decode; it returns
exactly the requested indices otherwise. Frame access is the adapter's job: the rest of the pipeline never
sees file names, HDF5 keys or archive members.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Protocol, Sequence

import numpy as np

from .ir import SourceError, UnitError, UnitIR


class SourceAdapter(Protocol):
    slug: str  # gm100 | rh20t | reassemble | aist
    name: str  # GM-100 | RH20T | REASSEMBLE | AIST-Bimanual
    unit_type: str  # episode | recording

    def discover(self, root: Path) -> list[str]: ...

    def read_unit(self, root: Path, unit_id: str) -> UnitIR: ...

    def read_frames(self, root: Path, unit_id: str, camera: str, indices: Sequence[int]) -> dict[int, np.ndarray]: ...


def require_root(root: Path, slug: str) -> Path:
    """The source root must exist and be a directory; anything else is a whole-source error."""
    root = Path(root)
    if not root.exists():
        raise SourceError(f"{slug}: root {root.name!r} does not exist")
    if not root.is_dir():
        raise SourceError(f"{slug}: root {root.name!r} is not a directory")
    return root


def safe_join(root: Path, rel: str) -> Path:
    """Join a unit-relative path under `root`, refusing anything that would escape it.

    Rejects absolute paths, `..` components, and symlinks (anywhere on the way) that resolve outside `root`.
    The error names only the relative path, so quarantine rows stay path-free.
    """
    p = PurePosixPath(rel)
    if p.is_absolute() or rel.startswith(("/", "\\")) or os.path.isabs(rel):
        raise UnitError("unit path is absolute", file=rel)
    if any(part == ".." for part in p.parts):
        raise UnitError("unit path escapes the source root ('..')", file=rel)
    root_real = Path(os.path.realpath(root))
    target = Path(os.path.realpath(Path(root, *p.parts)))
    if target != root_real and root_real not in target.parents:
        raise UnitError("unit path resolves outside the source root (symlink)", file=rel)
    return Path(root, *p.parts)


def check_unit_id(unit_id: str) -> None:
    """A unit id is a single path-free token; ids from user input are checked before any file access."""
    if not unit_id or "/" in unit_id or "\\" in unit_id or unit_id in (".", "..") or ".." in unit_id.split("__"):
        raise UnitError(f"invalid unit id {unit_id!r}")


def rel(root: Path, path: Path) -> str:
    """Path of `path` relative to `root`, as a posix string (for quarantine rows and errors)."""
    try:
        return PurePosixPath(Path(path).relative_to(root)).as_posix()
    except ValueError:
        return Path(path).name
