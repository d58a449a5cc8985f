"""Full-content sha256 of upstream files, streamed, and cached by the file's identity.

    use_store(work_dir / "_content_hashes", verify=False)   # the build's store (None: this process only)
    size, sha = content_sha256(path)                          # OSError when the file cannot be read
    flush()                                                   # persist what this process hashed

A file's hash is reused while its identity is unchanged: (device, inode, size, mtime_ns, ctime_ns). Any write to a
file changes its ctime, and ctime cannot be set back (os.utime sets mtime and atime only), so an edit in the middle
of a file that keeps its size and restores its mtime is still seen; a rename, chmod or copy changes ctime or inode
too and costs one more read, never a wrong hash. With `verify` every file is read again, once per process, and what
is read replaces the stored entries (`processbench build --verify`). A hash is kept only when the file did not
change while it was read and its last change is older than RACY_S (a write in the same timestamp tick as the hash
would keep the identity: the guard git's index uses), so a file written a moment ago is hashed again at each use
instead of trusted.

The store is a folder of small tables, each written whole (temp file + rename) and named by its bytes' sha256, one
line per file: `dev ino size mtime_ns ctime_ns sha256 check`, `check` the first 16 hex digits of the sha256 of the
rest. A line that is cut or edited fails its check and is ignored (the file is hashed again), so a damaged store
costs time, never a wrong hash. Any number of processes read and add to it; when it holds more than MAX_TABLES
tables (or after a verify), the process that flushes merges them into one, keeping per (device, inode) the entry of
the latest ctime.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

CHUNK = 1 << 20  # bytes read at a time
RACY_S = 2.0  # a file changed less than this long ago is hashed but not persisted
MAX_TABLES = 16

_state: dict = {"store": None, "verify": False, "loaded": None, "known": {}, "new": {}, "verified": set()}


def use_store(directory: Path | None, verify: bool | None = None) -> None:
    """Cache hashes in `directory` (created when first flushed); None: in this process only. `verify`: hash every
    file again, whatever the store says (None: unchanged)."""
    directory = Path(directory) if directory is not None else None
    if directory != _state["store"]:
        _state.update(store=directory, loaded=None, known={}, new={}, verified=set())
    if verify is not None:
        _state["verify"] = bool(verify)


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _line(key: tuple, sha: str) -> str:
    body = " ".join(map(str, key)) + f" {sha}"
    return f"{body} {hashlib.sha256(body.encode()).hexdigest()[:16]}\n"


def _parse(text: str) -> dict[tuple, str]:
    out: dict[tuple, str] = {}
    for line in text.splitlines():
        body, _, check = line.rpartition(" ")
        if not body or hashlib.sha256(body.encode()).hexdigest()[:16] != check:
            continue
        parts = body.split(" ")
        if len(parts) != 6 or len(parts[5]) != 64:
            continue
        try:
            out[tuple(int(p) for p in parts[:5])] = parts[5]
        except ValueError:
            continue
    return out


def _tables(store: Path) -> list[Path]:
    try:
        return sorted(p for p in store.iterdir() if p.suffix == ".tsv" and not p.name.startswith("."))
    except OSError:
        return []


def _read(p: Path) -> dict[tuple, str]:
    try:
        return _parse(p.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _load() -> dict[tuple, str]:
    store = _state["store"]
    if store is not None and _state["loaded"] != store:
        for p in _tables(store):
            _state["known"].update(_read(p))
        _state["loaded"] = store
    return _state["known"]


def _hash_file(path: Path) -> tuple[os.stat_result, str]:
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        h = hashlib.sha256()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])
    return st, h.hexdigest()


def content_sha256(path: Path) -> tuple[int, str]:
    """(size, sha256 of every byte) of the file at `path`, from the cache while its identity holds."""
    key = _identity(os.stat(path))
    known = _load()
    if key in known and (not _state["verify"] or key in _state["verified"]):
        return key[2], known[key]
    st, sha = _hash_file(path)
    settled = time.time_ns() - max(key[3], key[4]) > RACY_S * 1e9
    if settled and _identity(os.stat(path)) == _identity(st) == key:  # not changed while (or just before) it was read
        _state["verified"].add(key)
        known[key] = sha
        _state["new"][key] = sha
    return st.st_size, sha


def _write_whole(path: Path, text: str) -> None:
    """temp file + rename: a reader sees the whole table or none (upstream_adapters stands without pipeline/)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def flush() -> None:
    """Persist the hashes this process computed since the last flush (no store: nothing to do). Never raises: a
    store that cannot be written costs hashing again next time."""
    store, new = _state["store"], _state["new"]
    if store is None or not new:
        return
    _state["new"] = {}
    try:
        store.mkdir(parents=True, exist_ok=True)
        text = "".join(_line(k, v) for k, v in sorted(new.items()))
        _write_whole(store / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.tsv", text)
        tables = _tables(store)
        if len(tables) <= MAX_TABLES and not _state["verify"]:
            return
        merged: dict[tuple, str] = {}
        for p in tables:
            merged.update(_read(p))
        merged.update(new)  # verified hashes replace whatever the store held
        latest: dict[tuple, tuple] = {}
        for k in merged:
            if k[:2] not in latest or k[4] > latest[k[:2]][4]:
                latest[k[:2]] = k
        text = "".join(_line(k, merged[k]) for k in sorted(latest.values()))
        name = store / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.tsv"
        _write_whole(name, text)
        for p in tables:
            if p != name:
                p.unlink(missing_ok=True)
    except OSError:
        return
