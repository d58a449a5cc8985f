"""The frame pack: the bytes of one video's cached frames, one file per video (how the cache uses it: cache.py).

    pack   = MAGIC record*                          records sorted by frame index, each index once
    MAGIC  = b"PBPACK1\\n"                           (format 1)
    record = head key thumb png crc
    head   = struct ">4s32sIIddHII": b"PBFR", pixel sha256 (32 raw bytes), height, width, mean, std,
             len(key), len(thumb), len(png)
    key    = the entry's frame-cache key, ASCII ("<video digest>.<frame index>")
    thumb  = the grey thumbnail's raw bytes (stats["thumb"] is their hex)
    png    = the native RGB pixels, lossless PNG (fixed settings, pixels.encode_png)
    crc    = ">I" zlib.crc32 of head + key + thumb + png

Every record carries its own lengths and CRC, so a reader tells a good record from a cut or damaged one without
trusting anything else in the file, and finds the records after a damaged one again (the next record head whose CRC
holds). A record is used only when its CRC holds and it names a key of this pack's video. Bytes that are not such a
record (a damaged or cut record, another video's record, a missing MAGIC) are a *gap*: the frames whose index lies
between the good records around it could have been there, so looking one of them up says "damaged" rather than
"absent". The stats and the PNG are checked against each other by the cache (pixels must hash to pixel_sha256),
not here.

A pack's bytes depend only on its records (sorted, PNG settings fixed): writing the same frames at once or in several
writes gives the same file. This module handles bytes, not files; it is imported by pool workers.
"""

from __future__ import annotations

import struct
import zlib

MAGIC = b"PBPACK1\n"
RECORD = b"PBFR"
HEAD = struct.Struct(">4s32sIIddHII")
CRC = struct.Struct(">I")
NO_INDEX = -1  # below every frame index: the lower bound of a gap before the first good record


def split_key(key: str) -> tuple[str, int]:
    """(video digest, frame index) of a frame-cache key "<digest>.<index>"; ValueError when it is not of that form."""
    digest, dot, index = key.rpartition(".")
    if not dot or len(digest) != 64 or not index.isdigit() or str(int(index)) != index:
        raise ValueError(f"not a frame-cache key (<64-hex video digest>.<frame index>): {key!r}")
    return digest, int(index)


def encode_record(key: str, png: bytes, stats: dict) -> bytes:
    """One record: the entry's key, its stats (frame_stats: pixel_sha256, height, width, mean, std, thumb) and PNG."""
    kb, thumb = key.encode("ascii"), bytes.fromhex(stats["thumb"])
    body = b"".join(
        (
            HEAD.pack(
                RECORD,
                bytes.fromhex(stats["pixel_sha256"]),
                int(stats["height"]),
                int(stats["width"]),
                float(stats["mean"]),
                float(stats["std"]),
                len(kb),
                len(thumb),
                len(png),
            ),
            kb,
            thumb,
            png,
        )
    )
    return body + CRC.pack(zlib.crc32(body))


class Record:
    """A good record of a parsed pack: its key and index, the PNG bytes and the raw record (kept as views of the
    file's bytes, nothing copied); `stats()` decodes the stats."""

    __slots__ = ("key", "index", "png", "raw", "_head")

    def __init__(self, key: str, index: int, png: memoryview, raw: memoryview, head: tuple):
        self.key, self.index, self.png, self.raw, self._head = key, index, png, raw, head

    def stats(self) -> dict:
        sha, height, width, mean, std = self._head
        thumb = bytes(self.raw[HEAD.size + len(self.key) : len(self.raw) - CRC.size - len(self.png)])
        return {
            "pixel_sha256": sha.hex(),
            "height": height,
            "width": width,
            "mean": mean,
            "std": std,
            "thumb": thumb.hex(),
            "key": self.key,
        }


def _record_at(data: memoryview, pos: int) -> tuple[Record | None, int, str | None]:
    """(record or None, where the next record starts, why there is no good record here). A record whose CRC holds
    but whose key does not parse is returned with reason and its end, so the scan skips it whole."""
    if pos + HEAD.size + CRC.size > len(data):
        return None, len(data), "cut short (a write that did not finish, or a truncated file)"
    magic, sha, height, width, mean, std, klen, tlen, plen = HEAD.unpack_from(data, pos)
    if magic != RECORD:
        return None, -1, "no record starts here (damaged bytes)"
    start = pos + HEAD.size
    end = start + klen + tlen + plen
    if end + CRC.size > len(data):
        return None, -1, "a record runs past the end of the file (cut short, or a damaged length)"
    if zlib.crc32(data[pos:end]) != CRC.unpack_from(data, end)[0]:
        return None, -1, "a record fails its CRC (damaged bytes)"
    try:
        key = bytes(data[start : start + klen]).decode("ascii")
        _, index = split_key(key)
    except ValueError:
        return None, end + CRC.size, "a record names no frame-cache key"
    rec = Record(key, index, data[end - plen : end], data[pos : end + CRC.size], (sha, height, width, mean, std))
    return rec, end + CRC.size, None


class Pack:
    """A parsed pack of the video `digest`: its good records by frame index, and its gaps (open intervals of frame
    indices that damaged bytes could have held), each with the reason."""

    def __init__(self, data: bytes, digest: str):
        self.records: dict[int, Record] = {}
        self.gaps: list[tuple[int, float, str]] = []
        view = memoryview(data)
        if not data.startswith(MAGIC):
            self.gaps.append((NO_INDEX, float("inf"), "not a frame pack (no PBPACK1 header: empty, cut or replaced)"))
            return
        pos, prev, damage = len(MAGIC), NO_INDEX, None
        while pos < len(view):
            rec, end, why = _record_at(view, pos)
            if rec is not None and not rec.key.startswith(digest + "."):
                rec, why = None, f"a record names key {rec.key[:16]}..., of another video (a swapped record or pack)"
            if rec is not None:
                if damage is not None:
                    self.gaps.append((prev, rec.index, damage))
                    damage = None
                self.records[rec.index] = rec
                prev, pos = rec.index, end
                continue
            damage = damage or why
            if end < 0:  # resynchronise on the next record head (its CRC decides whether it is one)
                end = data.find(RECORD, pos + 1)
                if end < 0:
                    break
            pos = end
        if damage is not None:
            self.gaps.append((prev, float("inf"), damage))

    def damaged(self, index: int) -> str | None:
        """Why frame `index` may have been in this pack but cannot be read from it, or None."""
        return next((why for lo, hi, why in self.gaps if lo < index < hi), None)

    def merged(self, new: dict[int, bytes]) -> bytes:
        """The bytes of this pack's good records with `new` ({index: record}) added or replacing them."""
        raws: dict[int, bytes | memoryview] = {i: r.raw for i, r in self.records.items()}
        raws.update(new)
        return pack_bytes(raws)


def pack_bytes(records: dict[int, bytes | memoryview]) -> bytes:
    """A pack of {frame index: record}, sorted by index."""
    return MAGIC + b"".join(records[i] for i in sorted(records))
