"""Atomic, deterministic file writes (temp file in the same folder + rename), shared by every stage."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import polars as pl


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_json(obj) -> str:
    """Canonical JSON for release files: sorted keys, 2-space indent, UTF-8, trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def compact_json(obj) -> str:
    """Canonical compact JSON for values stored inside table cells."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, dumps_json(obj))


def write_parquet(path: Path, df: pl.DataFrame) -> None:
    """Parquet with fixed settings (zstd, no statistics drift): identical bytes for identical frames and versions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        df.write_parquet(tmp, compression="zstd", compression_level=3, statistics=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: Path, df: pl.DataFrame) -> None:
    """One compact JSON object per row, keys in column order, nulls kept."""
    lines = [json.dumps(row, ensure_ascii=False, separators=(",", ":")) for row in df.iter_rows(named=True)]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
