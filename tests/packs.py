"""Plant defects in frame-cache packs (pipeline/frames/pack.py) for the tests: each helper damages one record (or the
file) the way a real fault would, reading the records with the documented layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.frames import pack
from pipeline.frames.pixels import decode_png, encode_png


def records(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, key) of each record of a well-formed pack, in file order."""
    out, pos = [], len(pack.MAGIC)
    while pos < len(data):
        *_, klen, tlen, plen = pack.HEAD.unpack_from(data, pos)
        start = pos + pack.HEAD.size
        end = start + klen + tlen + plen + pack.CRC.size
        out.append((pos, end, data[start : start + klen].decode("ascii")))
        pos = end
    return out


def keys(path: Path) -> list[str]:
    return [k for _, _, k in records(path.read_bytes())]


def _span(data: bytes, key: str) -> tuple[int, int]:
    (span,) = [(s, e) for s, e, k in records(data) if k == key]
    return span


def flip(path: Path, key: str, part: str) -> None:
    """Flip one byte of the record's thumbnail ("thumb") or PNG ("png"); its CRC is left as it was (bit rot)."""
    data = bytearray(path.read_bytes())
    start, end = _span(bytes(data), key)
    *_, klen, tlen, plen = pack.HEAD.unpack_from(data, start)
    thumb = start + pack.HEAD.size + klen
    at = {"thumb": thumb + tlen // 2, "png": thumb + tlen + plen // 2}[part]
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def forge(path: Path, key: str, *, new_key: str | None = None, other_pixels: bool = False) -> None:
    """Rewrite the record of `key` with a valid CRC (so only the cache's other checks can tell): named `new_key`,
    and/or with a PNG of other pixels (inverted) under its recorded stats."""
    data = path.read_bytes()
    rec = pack.Pack(data, pack.split_key(key)[0]).records[pack.split_key(key)[1]]
    png = bytes(rec.png)
    if other_pixels:
        png = encode_png(np.ascontiguousarray(255 - decode_png(png)), 1)
    start, end = _span(data, key)
    path.write_bytes(data[:start] + pack.encode_record(new_key or key, png, rec.stats()) + data[end:])


def cut(path: Path, key: str) -> None:
    """Cut the file in the middle of the record of `key` (a truncated file, or a writer killed mid-write)."""
    data = path.read_bytes()
    start, end = _span(data, key)
    path.write_bytes(data[: (start + end) // 2])
