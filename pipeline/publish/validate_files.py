"""The validator's walk over a release folder's entries (pipeline/publish/validate.py): what may lie there, and each file read
in bounded memory. A file past `release.max_file_bytes` is reported by its name and size and never read (no file the
build writes comes near it: a 30 GB sparse file planted in a release cost the validator a MemoryError); every other
text file is decoded as UTF-8 one block at a time, never held whole."""

from __future__ import annotations

from typing import TYPE_CHECKING

import codecs
import os
from pathlib import Path

from pipeline.core.io import is_temp_file
from pipeline.core.leaks import find_path_leaks

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

BLOCK = 8 << 20  # bytes decoded at a time


def max_file_bytes(cfg: Settings) -> int:
    return int(cfg.release.max_file_bytes)


def utf8_problem(path: Path) -> str | None:
    """Why the file is not UTF-8 text (the first bad byte and its offset), or None; read one block at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(BLOCK)
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                return f"byte 0x{exc.object[exc.start]:02x} at offset {offset - pending + exc.start}"
            if not block:
                return None
            offset += len(block)


def check_files(root: Path, add, max_bytes: int) -> set[str]:
    """Every entry of the folder, dot-files included: only regular files and folders the build writes. A symlink (it
    could point anywhere, and a copy would not carry it), a dot-file (a stray note, or the `.tmp` of a killed write),
    a non-UTF-8 text file, a file past `max_bytes` and a file name that names this machine or user are each INVALID
    with their name (`add(problem)`). Returns the files too large to read, which every later check leaves unread.
    (Text files are read as UTF-8 with replacement elsewhere, so one bad byte is reported here, never a traceback.)"""
    too_big: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                add(f"{rel}: a symbolic link (release files must be regular files)")
            elif name.startswith("."):
                add(
                    f"{rel}: "
                    + (
                        "temp file of an interrupted write"
                        if is_temp_file(name)
                        else "stray dot-file (the build writes none)"
                    )
                )
            elif not path.is_dir() and not path.is_file():
                add(f"{rel}: not a regular file")
            elif path.is_file() and (size := path.stat().st_size) > max_bytes:
                add(
                    f"{rel}: {size} bytes, past release.max_file_bytes ({max_bytes}): not read (the build writes no "
                    "file this large)"
                )
                too_big.add(rel)
            elif path.is_file() and path.suffix != ".parquet" and (why := utf8_problem(path)):
                add(f"{rel}: not UTF-8 text ({why})")
            for leak in find_path_leaks(rel):
                add(f"{rel}: file name: {leak}")
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not (here / d).is_symlink()]
    return too_big
