"""Every file of a written release scanned for path / identity leaks (pipeline/core/leaks.py), side by side on a process
pool, each file read in pieces so that a worker never holds a whole file's text.

    release_leaks(Path("release"), cfg)      # ["splits/x.jsonl: absolute path '/home/alice/x'", ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

import polars as pl

from pipeline.release import writers
from pipeline.core.leaks import find_path_leaks
from pipeline.core.pool import run_tasks

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

SCAN_ROWS = 4096  # parquet rows, ...
SCAN_BYTES = 8 << 20  # ... or bytes of a text file, scanned at a time: a worker never holds a whole file's text
OVERLAP = 64 << 10  # bytes a piece of an overlong line repeats of the one before (a path never runs longer)


def _text_pieces(path: Path, rel: str):
    """A release file's text in pieces cut at line ends (a parquet file as its rows' JSON lines). No path, folder or
    user name spans a line end (and no UTF-8 character does), so the pieces hold the same findings as the whole."""
    if rel.endswith(".parquet"):
        df = pl.read_parquet(path)
        for offset in range(0, df.height, SCAN_ROWS):
            yield df.slice(offset, SCAN_ROWS).write_ndjson()
        return
    with open(path, "rb") as fh:
        rest: list[bytes] = []  # read since the last line end (kept as parts: a long line is not copied per read)
        while block := fh.read(SCAN_BYTES):
            cut = block.rfind(b"\n") + 1
            if not cut and sum(map(len, rest)) < 4 * SCAN_BYTES:
                rest.append(block)
                continue
            if not cut:  # a line this long is scanned in pieces that overlap by one block's tail
                yield b"".join([*rest, block]).decode("utf-8", "replace")
                rest = [block[-OVERLAP:]]
                continue
            yield b"".join([*rest, block[:cut]]).decode("utf-8", "replace")
            rest = [block[cut:]]
        if tail := b"".join(rest):
            yield tail.decode("utf-8", "replace")


def _file_leaks(task: tuple[str, str]) -> tuple[str, list[str]]:
    """The path / identity leaks of one release file (a parquet file is read as its rows' JSON text)."""
    root, rel = task
    found: list[str] = []
    try:
        for piece in _text_pieces(Path(root) / rel, rel):
            found += [leak for leak in find_path_leaks(piece) if leak not in found]
    except Exception:
        if not rel.endswith(".parquet"):
            raise
    return rel, [f"{rel}: {leak}" for leak in found]


def release_leaks(release_dir: Path, cfg: Settings, workers: int | None = 0, skip=frozenset()) -> list[str]:
    """Absolute paths, this machine's folders and user / host names in any release file, in file order. The files
    are scanned side by side (`workers`: pool size, 0 = cores): the scan reads every byte of the release (but the
    files in `skip`: too large to read, which the validator reports by themselves)."""
    root = Path(release_dir)
    names = [
        rel
        for rel in writers.release_files_on_disk(root, cfg) + [writers.file_names(cfg)["checksums"]]
        if (root / rel).is_file() and rel not in skip
    ]
    found: dict[str, list[str]] = {}
    run_tasks(
        _file_leaks,
        [(str(root), rel) for rel in names],
        workers,
        lambda r: found.__setitem__(*r),
        lambda task, reason: (task[1], [f"{task[1]}: cannot be scanned for paths: {reason}"]),
    )
    return [leak for rel in names for leak in found.get(rel, [])]
