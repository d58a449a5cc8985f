"""Render memos: the image hashes of each rendered item, kept in a few table files instead of one file per item.

    renders/<sha256 of the table's bytes, 32 hex>.jsonl
        one memo per line, compact JSON {"check": c, "hashes": [sha256, ...], "key": rkey},
        c = sha256("<rkey>:<hash>,<hash>,...")[:16]

A run keeps the memos it renders in memory and writes them as one new table (`flush`, after every FLUSH_EVERY
memos and at the end of add_image_hashes): one atomic write (temp file + rename) per table, instead of one per item
(15,499 tiny files took ~6 s at release scale). A table is complete or absent (a crash loses the memos not yet
flushed, which are then rendered again); the name is its content hash, so processes writing at the same time never
collide, and tables are never appended to. Tables are read once per process, on the first lookup, sorted by name.

Every line proves itself: its check binds the hashes to its key, so a damaged line (bit flips, a cut, another
memo's hashes under this key) is not used: counted in `counters["bad_renders"]`, logged, and dropped (its table is
rewritten without it), so the item is rendered again and the damage is reported once. A memo replaced by `put`
(the caller found it wrong for its item, e.g. the wrong number of images) is dropped from its old table at the
next flush, so the replaced memo is not met again. Folders of the earlier one-file-per-memo layout
(renders/<kk>/<rkey>.json) are not read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

FLUSH_EVERY = 4096  # memos held in memory before they are written as a table (bounds what a crash loses)
SUFFIX = ".jsonl"


def memo_check(rkey: str, hashes: list[str]) -> str:
    return hashlib.sha256(f"{rkey}:{','.join(hashes)}".encode("ascii")).hexdigest()[:16]


def memo_line(rkey: str, hashes: list[str]) -> bytes:
    """The table line of one memo."""
    return (
        json.dumps(
            {"check": memo_check(rkey, hashes), "hashes": list(hashes), "key": rkey},
            sort_keys=True,
            separators=(",", ":"),
        ).encode("ascii")
        + b"\n"
    )


def parse_line(line: bytes) -> tuple[str, list[str]] | None:
    """(rkey, hashes) of a good line, None for a damaged one."""
    try:
        memo = json.loads(line)
        rkey, hashes = memo["key"], memo["hashes"]
        if not (
            isinstance(rkey, str)
            and isinstance(hashes, list)
            and hashes
            and all(isinstance(h, str) and len(h) == 64 for h in hashes)
        ):
            return None
        return (rkey, hashes) if memo.get("check") == memo_check(rkey, hashes) else None
    except (ValueError, TypeError, KeyError, UnicodeError):
        return None


class RenderMemos:
    """The render-memo tables under `folder`. Used by one thread of one process (FrameCache.get_render/put_render);
    `write(path, bytes)` is the cache's atomic write."""

    def __init__(self, folder: Path, counters: dict, write: Callable[[Path, bytes], None]):
        self.folder = Path(folder)
        self.counters = counters
        self._write = write
        self._memos: dict[str, tuple[list[str], str | None]] | None = None  # rkey -> (hashes, table name or None)
        self._pending: dict[str, list[str]] = {}
        self._superseded: dict[str, set[str]] = {}  # table name -> rkeys replaced since it was read

    # ------------------------------------------------------------------------------------------------ read
    def _load(self) -> dict[str, tuple[list[str], str | None]]:
        if self._memos is None:
            self._memos = {}
            try:
                names = sorted(p.name for p in os.scandir(self.folder) if p.name.endswith(SUFFIX) and p.is_file())
            except FileNotFoundError:
                names = []
            for name in names:
                self._read_table(name)
        return self._memos

    def _lines(self, name: str) -> tuple[list[tuple[bytes, str, list[str]]], int]:
        """The good lines of table `name` as (line, rkey, hashes), and how many lines are damaged (OSError when the
        table cannot be read)."""
        good, bad = [], 0
        for line in (self.folder / name).read_bytes().split(b"\n"):
            if not line.strip():
                continue
            memo = parse_line(line)
            if memo is None:
                bad += 1
            else:
                good.append((line + b"\n", *memo))
        return good, bad

    def _read_table(self, name: str) -> None:
        try:
            good, bad = self._lines(name)
        except FileNotFoundError:  # rewritten by another process since the listing: its new table is read too
            return
        except OSError as exc:
            self.counters["bad_renders"] += 1
            log.warning("frame cache: render memo table %s is unreadable (%s); its items are rendered again", name, exc)
            return
        if bad:
            self.counters["bad_renders"] += bad
            log.warning(
                "frame cache: %d damaged render memo(s) in table %s are not used; their items are rendered again",
                bad,
                name,
            )
            name = self._rewrite(name, [line for line, *_ in good])
        for _, rkey, hashes in good:
            self._memos.setdefault(rkey, (hashes, name))

    def get(self, rkey: str) -> list[str] | None:
        hit = self._pending.get(rkey)
        if hit is not None:
            return hit
        hit = self._load().get(rkey)
        return None if hit is None else hit[0]

    # ------------------------------------------------------------------------------------------------ write
    def put(self, rkey: str, hashes: list[str]) -> None:
        old = self._load().get(rkey)
        if old is not None and old[0] == list(hashes):
            return
        if old is not None and old[1] is not None:
            self._superseded.setdefault(old[1], set()).add(rkey)
        self._pending[rkey] = list(hashes)
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the memos put since the last flush as one table; drop replaced memos from their old tables."""
        if self._pending:
            data = b"".join(memo_line(k, h) for k, h in sorted(self._pending.items()))
            name = self._table_name(data)
            self._write(self.folder / name, data)
            memos = self._load()
            for rkey, hashes in self._pending.items():
                memos[rkey] = (hashes, name)
            self._pending = {}
        for old, rkeys in sorted(self._superseded.items()):
            try:
                good, _ = self._lines(old)
            except FileNotFoundError:
                continue
            new = self._rewrite(old, [line for line, rkey, _ in good if rkey not in rkeys])
            for rkey, (hashes, table) in list(self._memos.items()):
                if table == old:
                    self._memos[rkey] = (hashes, new)
        self._superseded = {}

    @staticmethod
    def _table_name(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:32] + SUFFIX

    def _rewrite(self, name: str, lines: list[bytes]) -> str | None:
        """Replace table `name` by one holding `lines` (none: just removed); the new table's name."""
        new = None
        if lines:
            data = b"".join(lines)
            new = self._table_name(data)
            if new != name:
                self._write(self.folder / new, data)
        if new != name:
            (self.folder / name).unlink(missing_ok=True)
        return new
