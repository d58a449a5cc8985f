"""Digests that decide whether stored work is still valid: of the code, of a file, of the config sections a
computation reads. assets/fingerprint.py builds the steps' fingerprints from them; the candidates stage keys its
per-family tables with them (pipeline/stages.py run_candidates)."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_PATH_KEYS = ("work_dir", "release_dir")  # where the build writes changes no byte it writes


@lru_cache(maxsize=None)
def code_digest(packages: tuple[str, ...] = ("pipeline", "upstream_adapters", "assets")) -> str:
    """sha256 over the path and bytes of every .py file of the given packages (of this repository)."""
    h = hashlib.sha256()
    for pkg in packages:
        for p in sorted((REPO / pkg).rglob("*.py")):
            h.update(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def config_part(cfg: dict, sections: tuple[str, ...]) -> dict:
    """The config sections a computation reads: `labels`, `sources.<slug>` (one source's entry), `tasks.<slug>` (the
    templates that list the source), `*` = all; build's output folders left out."""
    def section(name: str):
        if name == "*":
            return {k: section(k) for k in sorted(cfg)}
        head, _, slug = name.partition(".")
        value = cfg.get(head)
        if slug and head == "tasks":
            value = {tid: t for tid, t in (value or {}).items() if slug in t["sources"]}
        elif slug:
            value = (value or {}).get(slug)
        if head == "build" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in _PATH_KEYS}
        return value
    return {s: section(s) for s in sections}


def digest(doc) -> str:
    """sha256 of a JSON-able document (sorted keys; paths and other objects by str)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def table_digest(df) -> str:
    """sha256 of a polars table's schema and rows (row hashes in order; polars's row hash is fixed per version)."""
    import polars as pl

    h = hashlib.sha256(f"{pl.__version__}\0{list(df.schema.items())}".encode())
    h.update(df.hash_rows(seed=0).to_numpy().tobytes())
    return h.hexdigest()
