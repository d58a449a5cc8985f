"""Random access into a .tar.gz without extracting it.

One pass over the archive lists its members (name, data offset, size, kind) and keeps zlib checkpoints every `span`
uncompressed bytes, so reading a member later decompresses at most one span. Damage (corrupt or truncated gzip,
a broken tar header, trailing garbage) is recorded on the index, never trusted. Member names with `..` or absolute
names are set aside in `ignored`; links inside the archive keep kind "link" so that readers refuse them.

Bounds (`limits.ArchiveLimits`): indexing stops, as damage, once the archive expands past `max_archive_bytes`; each
member records the compressed bytes its data spanned (measured in whole input chunks, so never below one chunk), and
`read` refuses a member over `max_member_bytes` or `max_compression_ratio` before inflating a byte of it.
"""

from __future__ import annotations

import bisect
import io
import math
import tarfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from upstream_adapters.limits import ArchiveLimits


_CHUNK = 1 << 16


class ArchiveDamaged(Exception):
    """The gzip or tar structure of an archive is broken."""


class MemberRefused(Exception):
    """A member past the archive limits (too large, or a compression ratio of a bomb): never inflated."""

    def __init__(self, reason: str, member: str):
        super().__init__(reason)
        self.member = member


class _Checkpoints:
    """Decompressor snapshots along one gzip file: (uncompressed pos, compressed pos, zlib state or None)."""

    def __init__(self, span: int):
        self.span = span
        self.upos = [0]
        self.points: list[tuple[int, int, object]] = [(0, 0, None)]
        self.lock = threading.Lock()

    def want(self, upos: int) -> bool:
        return upos >= self.upos[-1] + self.span

    def add(self, upos: int, cpos: int, state) -> None:
        with self.lock:
            if upos >= self.upos[-1] + self.span:
                self.upos.append(upos)
                self.points.append((upos, cpos, state))

    def best(self, target: int) -> tuple[int, int, object]:
        with self.lock:
            return self.points[bisect.bisect_right(self.upos, target) - 1]


class _GzReader:
    """A forward reader of the uncompressed bytes of a (possibly multi-member) gzip file, seekable through
    checkpoints. Raises ArchiveDamaged on corrupt data, a failed CRC, truncation or trailing garbage."""

    def __init__(self, fh, checkpoints: _Checkpoints):
        self._fh = fh
        self._cps = checkpoints
        self._restore(checkpoints.points[0])

    def _restore(self, point) -> None:
        upos, cpos, state = point
        self._d = state.copy() if state is not None else zlib.decompressobj(31)
        self._cpos = cpos
        self._upos = upos
        self._buf = b""
        self._off = 0
        self._eof = False

    def _fill(self) -> None:
        if self._d.eof:  # one gzip member ended: another member, zero padding, or the end
            self._fh.seek(self._cpos)
            head = self._fh.read(2)
            if not head:
                self._eof = True
                return
            if head != b"\x1f\x8b":
                rest = head + self._fh.read(1 << 20)
                if rest.strip(b"\0") or self._fh.read(1):
                    raise ArchiveDamaged("unexpected bytes after the end of the gzip stream")
                self._eof = True
                return
            self._d = zlib.decompressobj(31)
        self._fh.seek(self._cpos)
        raw = self._fh.read(_CHUNK)
        if not raw:
            raise ArchiveDamaged(f"gzip stream ends early at byte {self._cpos} (truncated archive)")
        try:
            out = self._d.decompress(raw)
        except zlib.error as exc:
            raise ArchiveDamaged(f"corrupt gzip data near byte {self._cpos} ({exc})") from None
        self._cpos += len(raw) - (len(self._d.unused_data) if self._d.eof else 0)
        self._buf, self._off = out, 0
        end = self._upos + len(out)
        if not self._d.eof and self._cps.want(end):
            self._cps.add(end, self._cpos, self._d.copy())

    def tell(self) -> int:
        return self._upos

    def read(self, n: int = -1) -> bytes:
        parts = []
        need = n if n is not None and n >= 0 else math.inf
        while need > 0:
            avail = len(self._buf) - self._off
            if not avail:
                if self._eof:
                    break
                self._fill()
                continue
            take = int(min(avail, need))
            parts.append(self._buf[self._off : self._off + take])
            self._off += take
            self._upos += take
            need -= take
        return b"".join(parts)

    def _skip(self, n: int) -> None:
        while n > 0:
            avail = len(self._buf) - self._off
            if not avail:
                if self._eof:
                    raise ArchiveDamaged("tar member data runs past the end of the archive")
                self._fill()
                continue
            take = min(avail, n)
            self._off += take
            self._upos += take
            n -= take

    def seek(self, target: int, whence: int = 0) -> int:
        if whence == 1:
            target += self._upos
        elif whence != 0:
            raise io.UnsupportedOperation("seek from the end of a gzip stream")
        if target == self._upos:
            return target
        point = self._cps.best(target)
        if target < self._upos or point[0] > self._upos + self._cps.span:
            self._restore(point)
        self._skip(target - self._upos)
        return target

    def drain(self) -> None:
        """Read to the end (verifies every gzip member's CRC and length)."""
        while True:
            self._upos += len(self._buf) - self._off
            self._buf, self._off = b"", 0
            if self._eof:
                return
            self._fill()


@dataclass
class Member:
    name: str  # full member name inside the tar (normalised: no leading ./)
    offset: int  # uncompressed offset of the data
    size: int
    kind: str  # file | dir | link | other
    csize: int | None = None  # compressed bytes its data spanned in the archive (whole input chunks)


@dataclass
class TarGzIndex:
    """Member index of one .tar.gz, built in a single pass by `build`; subclasses file members in `record`."""

    rel: str  # archive path relative to the source root
    key: tuple  # identity of the file the index was built from (real path, size, mtime)
    checkpoints: _Checkpoints
    ignored: list[str] = field(default_factory=list)  # unsafe member names (.., absolute)
    damage: str | None = None
    limits: ArchiveLimits = field(default_factory=ArchiveLimits)

    @classmethod
    def build(cls, path: Path, rel: str, key: tuple, span: int | None = None, limits: ArchiveLimits | None = None):
        span = span or max(16 << 20, key[1] // 1024)  # <= ~1000 checkpoints of ~40 KB each
        arc = cls(rel=rel, key=key, checkpoints=_Checkpoints(span), limits=limits or ArchiveLimits())
        last: tuple[Member, int] | None = None  # the previous file member and the compressed position at its data

        def close_last(cpos: int) -> None:
            if last is not None:
                last[0].csize = max(cpos - last[1], _CHUNK)

        try:
            with open(path, "rb") as fh:
                reader = _GzReader(fh, arc.checkpoints)
                with tarfile.open(fileobj=reader, mode="r:") as tf:
                    for ti in tf:
                        close_last(reader._cpos)
                        last = None
                        if ti.offset_data + ti.size > arc.limits.max_archive_bytes:
                            raise ArchiveDamaged(
                                f"the archive expands past archive_limits.max_archive_bytes "
                                f"({arc.limits.max_archive_bytes}); not read further"
                            )
                        name = ti.name
                        while name.startswith("./"):
                            name = name[2:]
                        parts = name.split("/")
                        if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
                            arc.ignored.append(name)
                            continue
                        kind = (
                            "file"
                            if ti.isreg()
                            else "dir"
                            if ti.isdir()
                            else "link"
                            if (ti.issym() or ti.islnk())
                            else "other"
                        )
                        member = Member(name, ti.offset_data, ti.size, kind)
                        last = (member, reader._cpos) if kind == "file" else None
                        arc.record(parts, member)
                reader.drain()
                close_last(reader._cpos)
        except (ArchiveDamaged, tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as exc:
            arc.damage = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ArchiveDamaged) else str(exc)
        return arc

    def record(self, parts: list[str], member: "Member") -> None:
        """File one safe member (parts = its name split on '/')."""

    def read(self, path: Path, members: Iterable["Member"]) -> dict[str, bytes]:
        """Read several members in one forward pass (sorted by offset); MemberRefused before inflating anything
        when one of them is past the limits."""
        members = list(members)
        for m in members:
            why = self.limits.refuse(m.name, m.size, m.csize)
            if why:
                raise MemberRefused(why, m.name)
        out: dict[str, bytes] = {}
        with open(path, "rb") as fh:
            reader = _GzReader(fh, self.checkpoints)
            for m in sorted(members, key=lambda m: m.offset):
                reader.seek(m.offset)
                data = reader.read(m.size)
                if len(data) != m.size:
                    raise ArchiveDamaged(f"member {m.name} is cut short")
                out[m.name] = data
        return out
