"""Atomic, deterministic file writes (temp file in the same folder + rename), shared by every stage.

Temp files are named `.<name>.<random>.tmp` (TMP_PREFIX/TMP_SUFFIX): a write killed before its rename leaves one,
which `clean_temp_files` removes at the start of the next build. Files get the mode a plain `open()` would give
(0666 minus the umask), not mkstemp's 0600, so a release folder can be shared or served.

Reading side: `ParquetTables` (a folder's tables, each read when asked for), `sorted_by` and `key_runs` (a big
table cut per unit without a copy or a Python object per row).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from io import BytesIO
from pathlib import Path

import numpy as np
import polars as pl


TMP_SUFFIX = ".tmp"


def _temp_file(path: Path) -> tuple[int, str]:
    """A new `.<name>.<random>.tmp` beside `path`, created 0666 so the kernel applies the umask as for a plain open()
    (mkstemp creates 0600, and reading the umask means setting it, process-wide, under other threads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), str(tmp)
        except FileExistsError:
            continue


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = _temp_file(path)
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


def compact_json_column(expr: pl.Expr) -> pl.Expr:
    """`compact_json` of every value of a column, computed by polars (a null stays null). Same text for strings,
    integers, booleans and lists of them, and for structs whose fields are in sorted order (compact_json sorts keys);
    not for floats (polars writes 1e-7, json.dumps 1e-07). tests/test_io_json.py pins it to compact_json."""
    wrapped = pl.struct(expr.alias("v")).struct.json_encode()  # '{"v":<value>}'
    return pl.when(expr.is_not_null()).then(wrapped.str.slice(5).str.head(-1))


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, dumps_json(obj))


def write_parquet(path: Path, df: pl.DataFrame, metadata: dict[str, str] | None = None) -> None:
    """Parquet with fixed settings (zstd, no statistics drift): identical bytes for identical frames and versions.
    `metadata`: key-value pairs kept in the file's footer (pl.read_parquet_metadata reads them back)."""
    path = Path(path)
    fd, tmp = _temp_file(path)
    os.close(fd)
    try:
        df.write_parquet(tmp, compression="zstd", compression_level=3, statistics=True, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_plain(dtype: pl.DataType) -> bool:
    """A column type whose values polars' JSON writer spells exactly as json.dumps(ensure_ascii=False) does (pinned
    over every code point by tests/test_io_json.py); floats are not (1e-7 against 1e-07)."""
    return dtype.is_integer() or dtype in (pl.String, pl.Boolean, pl.Null)


def jsonl_bytes(df: pl.DataFrame) -> bytes:
    """UTF-8 lines of one compact JSON object per row, keys in column order, nulls kept. A table of strings, integers
    and booleans is written by polars in one call (straight to bytes: no Python string to encode); any other row by
    row through json.dumps."""
    if all(_json_plain(dtype) for dtype in df.schema.values()):
        buf = BytesIO()
        df.write_ndjson(buf)
        return buf.getvalue()
    rows = df.iter_rows(named=True)
    return "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n" for row in rows).encode("utf-8")


def write_jsonl(path: Path, df: pl.DataFrame) -> None:
    """`jsonl_bytes(df)`, written atomically."""
    atomic_write_bytes(path, jsonl_bytes(df))


def is_temp_file(name: str) -> bool:
    """A leftover of an atomic write (`.<name>.<random>.tmp`)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def clean_temp_files(root: Path) -> list[Path]:
    """Remove what killed atomic writes left under `root` (only our own `.<name>.*.tmp` names); returns them."""
    removed = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if is_temp_file(name):
                p = Path(dirpath) / name
                p.unlink(missing_ok=True)
                removed.append(p)
    return sorted(removed)


class ParquetTables(Mapping):
    """The parquet tables of a folder by name, each read when asked for and not kept: a consumer that turns tables
    into structures of its own (the candidate generators' per-unit arrays) does not hold both in memory."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def __getitem__(self, name: str) -> pl.DataFrame:
        path = self.folder / f"{name}.parquet"
        if not path.is_file():
            raise KeyError(name)
        return pl.read_parquet(path)

    def __iter__(self):
        return iter(sorted(p.stem for p in self.folder.glob("*.parquet")))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def key_runs(df: pl.DataFrame, keys: list[str]) -> list[tuple]:
    """The runs of equal `keys` in a table sorted by them: [(*key values, start, end_exclusive)]. Found in polars, so
    a million-row table costs one tuple per run, not a Python object per row."""
    if df.height == 0:
        return []
    first = pl.int_range(pl.len(), dtype=pl.Int64)
    new = pl.any_horizontal([pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys]) | (first == 0)
    starts = df.select(*keys, first.alias("_start"), new.alias("_new")).filter("_new")
    ends = starts.get_column("_start").shift(-1, fill_value=df.height)
    return list(
        zip(*(starts.get_column(k).to_list() for k in keys), starts.get_column("_start").to_list(), ends.to_list())
    )


def sorted_by(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`df` sorted by `keys` (a key of the table: no ties). A table already in that order is returned as it is: a sort
    would copy it whole, which for a million-row table is hundreds of MB held twice."""
    order = df.select(pl.arg_sort_by(keys)).to_series().to_numpy()
    return df if np.array_equal(order, np.arange(df.height)) else df[order]


def strict_json(text: str):
    """json.loads that refuses what a reader could take two ways: a key twice in one object (json keeps the last, a
    stricter reader the first or neither); ValueError naming it. A nesting too deep for the parser is a ValueError
    too (never a RecursionError that stops the validator)."""

    def pairs(items):
        seen: set = set()
        for key, _ in items:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
        return dict(items)

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except RecursionError:
        raise ValueError("nested too deep") from None
