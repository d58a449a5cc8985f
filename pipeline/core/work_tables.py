"""Work tables that prove themselves: a table kept for a later run records its sha256 and row count when written,
and is checked against that record when read back. A table that is missing its record, cut, edited or unreadable is
never used: the caller builds it again (and says so), so damage in the work folder costs time, never a wrong row or
a failed build.

    write_checked(path, df, metadata)         # the parquet, then `<name>.check.json` beside it: {"sha256", "rows"}
    df = read_checked(path, what)             # the table, or None (logged with the reason) when it fails its record
    rec = record_of(path, rows)               # {"sha256", "rows"} of a file just written (kept by the caller)
    problem = check(path, rec)                # None when the file still has the recorded bytes

The step outputs are checked the same way by their step's record (assets/fingerprint.py); this module is for the
tables a step keeps for itself and reads back on a later run (the candidates step's per-family parts, the items
step's last selection).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl

from pipeline.core.io import atomic_write_text, write_parquet
from pipeline.core.digests import file_digest

log = logging.getLogger(__name__)


def check_path(path: Path) -> Path:
    path = Path(path)
    return path.with_name(f"{path.name}.check.json")


def record_of(path: Path, rows: int) -> dict:
    return {"sha256": file_digest(Path(path)), "rows": int(rows)}


def check(path: Path, rec) -> str | None:
    """Why the file at `path` is not the one `rec` records (None: it is)."""
    path = Path(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str) or not isinstance(rec.get("rows"), int):
        return "no record of what was written"
    if not path.is_file():
        return "missing"
    try:
        if file_digest(path) == rec["sha256"]:
            return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    try:
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
        return f"edited: {rows} rows where {rec['rows']} were written, other bytes than its record"
    except Exception:  # noqa: BLE001 - any parquet error: the file is cut or garbled
        return f"damaged: not a readable table (it held {rec['rows']} rows when written)"


def write_checked(path: Path, df: pl.DataFrame, metadata: dict[str, str] | None = None) -> None:
    """The table (with `metadata` in its footer, covered by the record), then its record (a run cut between the two
    leaves a table without a record: not used)."""
    path = Path(path)
    check_path(path).unlink(missing_ok=True)
    write_parquet(path, df, metadata)
    atomic_write_text(check_path(path), json.dumps(record_of(path, df.height), sort_keys=True) + "\n")


def read_record(path: Path) -> dict | None:
    try:
        rec = json.loads(check_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def read_checked(path: Path, what: str) -> pl.DataFrame | None:
    """The table at `path` when it has the bytes its record holds; None when it is absent (silently) or fails its
    record (logged as `what` and the reason; the caller builds it again)."""
    path = Path(path)
    if not path.is_file() and not check_path(path).is_file():
        return None
    problem = check(path, read_record(path))
    if problem is None:
        try:
            return pl.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - the recorded bytes were unreadable already: build it again
            problem = f"unreadable ({type(exc).__name__})"
    log.warning("%s: work table %s %s: built again", what, path.name, problem)
    return None


def remove(path: Path) -> None:
    """A table and its record."""
    Path(path).unlink(missing_ok=True)
    check_path(path).unlink(missing_ok=True)
