"""Reading zip members in place: a stored member through a seekable window on the zip file (no copy), and the
check that refuses member names that would escape an extraction folder (zip-slip)."""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

class Window(io.RawIOBase):
    """A read-only, seekable view of `size` bytes at `offset` of a file: a stored zip member without extracting."""

    def __init__(self, path: Path, offset: int, size: int):
        super().__init__()
        self._fh = open(path, "rb")
        self._offset, self._size, self._pos = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buf) -> int:
        n = max(0, min(len(buf), self._size - self._pos))
        if n == 0:
            return 0
        self._fh.seek(self._offset + self._pos)
        got = self._fh.readinto(memoryview(buf)[:n])
        self._pos += got
        return got

    def close(self) -> None:
        if not self.closed:
            self._fh.close()
        super().close()



def unsafe_member(name: str) -> str | None:
    """Why a zip member name must never be used (zip-slip), or None when it is a plain relative path."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or "\x00" in name:
        return "absolute"
    if any(part == ".." for part in re.split(r"[/\\]", name)):
        return "'..'"
    if "\\" in name:
        return "backslash"
    return None


def is_symlink(info) -> bool:
    """True for a zip member stored as a symbolic link (Unix mode S_IFLNK in the external attributes)."""
    return stat.S_ISLNK((info.external_attr >> 16) & 0xFFFF)
