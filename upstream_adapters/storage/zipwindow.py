"""Reading zip members in place: a stored member through a seekable window on the zip file (no copy), the check
that refuses member names that would escape an extraction folder (zip-slip), and the names a zip still shows in its
local headers when its central directory is unreadable (a truncated download), so that each unit it held is counted."""

from __future__ import annotations

import io
import os
import re
import stat
import struct
import zlib
from pathlib import Path

_LOCAL = b"PK\x03\x04"


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


def local_member_names(path: Path, limit: int = 100_000) -> list[str]:
    """Member names read header to header from the front of a zip, without its central directory (for a zip whose
    central directory is gone: the names of what it held). A member whose sizes follow its data (a data descriptor,
    as streaming zip writers do) is inflated and discarded to find its end; a stored one of that kind, a truncated
    member or a broken header ends the walk. Names are returned as found, never opened."""
    return local_members(path, limit)[0]


def local_members(path: Path, limit: int = 100_000) -> tuple[list[str], bool]:
    """(local_member_names, complete): complete when the walk ended at the central directory's first header, so the
    names are every member the zip held; False when it ended at a cut or a broken header (more may be lost)."""
    names: list[str] = []
    complete = False
    with open(path, "rb") as fh:
        total = os.fstat(fh.fileno()).st_size
        pos = 0
        while len(names) < limit:
            fh.seek(pos)
            head = fh.read(30)
            if len(head) < 30 or head[:4] != _LOCAL:
                complete = head[:4] == b"PK\x01\x02" or (head[:4] == b"PK\x05\x06" and bool(names))
                break
            flags, method = struct.unpack("<HH", head[6:10])
            csize = struct.unpack("<I", head[18:22])[0]
            nlen, xlen = struct.unpack("<HH", head[26:30])
            raw = fh.read(nlen)
            extra = fh.read(xlen)
            if len(raw) < nlen:
                break
            names.append(raw.decode("utf-8" if flags & 0x800 else "cp437", "replace"))
            data = pos + 30 + nlen + xlen
            if csize == 0xFFFFFFFF:  # zip64: the real size is in the extra field 0x0001
                csize = _zip64_csize(extra)
                if csize is None:
                    break
            if flags & 0x8:
                if method == 8:
                    end = _deflate_end(fh, data)
                    if end is None:
                        break
                    fh.seek(end)
                    pos = end + (16 if fh.read(4) == b"PK\x07\x08" else 12)
                else:  # stored: the descriptor whose compressed size is its own distance from the data
                    pos = _stored_end(fh, data)
                    if pos is None:
                        break
            else:
                pos = data + csize
            if pos > total:
                break
    return names, complete


def _zip64_csize(extra: bytes) -> int | None:
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[i : i + 4])
        if tag == 1 and size >= 16:
            return struct.unpack("<Q", extra[i + 12 : i + 20])[0]
        i += 4 + size
    return None


def _stored_end(fh, start: int) -> int | None:
    """Offset past the data descriptor of a stored member whose data starts at `start` (signature PK\\x07\\x08 and
    a compressed size equal to the data's length, 32- or 64-bit)."""
    fh.seek(start)
    buf, base = b"", start
    while True:
        chunk = fh.read(1 << 20)
        if not chunk:
            return None
        buf += chunk
        i = buf.find(b"PK\x07\x08")
        while i >= 0:
            if len(buf) < i + 24:
                break
            at = base + i
            if struct.unpack("<I", buf[i + 8 : i + 12])[0] == at - start:
                return at + 16
            if struct.unpack("<Q", buf[i + 8 : i + 16])[0] == at - start:
                return at + 24
            i = buf.find(b"PK\x07\x08", i + 1)
        keep = max(0, len(buf) - 24)  # a signature may straddle two chunks
        base, buf = base + keep, buf[keep:]


def _deflate_end(fh, start: int) -> int | None:
    """Offset just past the raw deflate stream starting at `start` (output discarded, memory bounded)."""
    d = zlib.decompressobj(-15)
    fh.seek(start)
    pos = start
    while not d.eof:
        chunk = fh.read(1 << 20)
        if not chunk:
            return None
        try:
            buf = chunk
            while buf and not d.eof:
                d.decompress(buf, 1 << 22)
                buf = d.unconsumed_tail
        except zlib.error:
            return None
        pos += len(chunk)
    return pos - len(d.unused_data)
