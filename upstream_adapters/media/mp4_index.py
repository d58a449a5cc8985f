"""The frame count and the seek index of a plain MP4 from its sample table, without a demux pass (the fast paths of
`video.count_frames` and `video.read_frames`).

Ingest counts the primary video's frames of every unit to check them against the unit's signal rows; opening each
file with PyAV (FFmpeg probes the streams) and demuxing every packet cost ~1.3 ms per video, most of the GM-100
ingest's video time. `sample_count` reads `moov` only and gives the number of packets FFmpeg's mov demuxer yields,
for the simple layout ffmpeg's muxer writes, and None for anything else:

- top-level boxes ftyp/free/skip/wide/mdat/moov only (no fragments); one track, a video track (`vide`) with one
  sample description and one self-contained data reference;
- `stsz`, `stts` and the chunk table (`stsc` + `stco`/`co64`) agree on the sample count, every sample has bytes, a
  positive duration and the one sample description, and every sample's bytes lie inside the file (a download cut
  short in `mdat` is left to FFmpeg, which reports it);
- no edit list, or one that FFmpeg's edit-list pass (mov_fix_index) keeps every sample of (`_check_edit`).

What FFmpeg makes of the rest of the header (codec configuration, metadata text PyAV must decode) is not
re-implemented: with the count comes a key of the header without its per-file parts (times, durations, sample
tables, edit list), and `video.count_frames` trusts the count only for a header key PyAV has already opened and
agreed with (tests/test_video.py compares both on whole, truncated and damaged files).

`sample_index` adds, for the same layouts, the pts of every packet and which packets are keyframes (what
`read_frames` seeks by; a demux pass per video was ~10 % of the frames step), where FFmpeg's timestamps and
keyframe flags are provably the table's: see its docstring and `_keyframes_are_flagged`. `video._seek_index` trusts
it per header key, only after a demuxed file of that header gave the same index (tests/test_mp4_index.py).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import struct
from typing import BinaryIO

# a moov larger than this is not the small index of a plain file: left to FFmpeg
MAX_MOOV_BYTES = 16 << 20
_TOP = frozenset({b"ftyp", b"free", b"skip", b"wide", b"mdat", b"moov"})
_MOOV = frozenset({b"mvhd", b"trak", b"udta", b"iods"})
_CONTAINERS = frozenset({b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf"})
# the boxes of the track the fast path knows; any other (sample groups, partial sync samples, compact sizes,
# track references, ...) sends the file to FFmpeg
_TRAK = _CONTAINERS | {
    b"tkhd",
    b"elst",
    b"mdhd",
    b"hdlr",
    b"vmhd",
    b"dref",
    b"stsd",
    b"stts",
    b"ctts",
    b"stss",
    b"stsc",
    b"stsz",
    b"stco",
    b"co64",
    b"sdtp",
    b"udta",
}
# per-file payloads, interpreted here: only their version and flags go into the header key
_PER_FILE = frozenset({b"elst", b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stco", b"co64", b"sdtp"})
# (creation, modification) and duration byte ranges of the full boxes' payloads, by version: blanked in the key
_TIMES = {
    b"mvhd": {0: ((4, 12), (16, 20)), 1: ((4, 20), (24, 32))},
    b"tkhd": {0: ((4, 12), (20, 24)), 1: ((4, 20), (28, 36))},
    b"mdhd": {0: ((4, 12), (16, 20)), 1: ((4, 20), (24, 32))},
}


class _Unsupported(Exception):
    """The file is not the simple case this module answers for."""


def sample_count(fh: BinaryIO) -> tuple[int, bytes] | None:
    """(packets FFmpeg's mov demuxer yields for the video track, header key) of a simple MP4 read from `fh`; None
    for any other file."""
    got = _parse(fh)
    return None if got is None else (len(got[0].sizes), got[1])


def sample_index(fh: BinaryIO) -> tuple[list[int], list[int], bytes] | None:
    """(pts of the packets in decode order, positions of the keyframe packets in that order, header key) that
    FFmpeg's mov demuxer gives for the video track of a simple MP4 (the seek index `video.read_frames` needs);
    None for any other file, and for a file whose timing is not the plain case below.

    pts = dts (sum of the stts durations before the sample) + ctts offset, minus the edit's media time when the
    file has an edit list: FFmpeg's edit-list pass shifts the timestamps so the edit starts at pts 0. Only the
    case where that shift is all it does is answered: no composition offset negative or past 2^28 (FFmpeg shifts
    dts or drops the table), no sample presented before the edit starts or at/after it ends (FFmpeg flags those to
    be discarded), a non-empty sync-sample table or none (every sample a keyframe), and sync samples the demuxer
    flags as keyframes too (`_keyframes_are_flagged`)."""
    got = _parse(fh)
    if got is None:
        return None
    table, key = got
    try:
        dts, offsets, keys = table.timing or _timing(table.moov, table.box, len(table.sizes), table.stts)
        if not _keyframes_are_flagged(fh, table, keys):
            return None
    except (_Unsupported, struct.error, IndexError, OSError, ValueError, OverflowError):
        return None
    cts = [d + o for d, o in zip(dts, offsets)]
    shift = 0
    if table.edit is not None:
        media_time, end = table.edit
        if min(cts) != media_time or max(cts) >= end:
            return None
        shift = media_time
    return [t - shift for t in cts], keys, key


# boxes walked into when looking for what a file declares (sample tables of tracks, runs of movie fragments)
_DECLARING = frozenset({b"moov", b"trak", b"mdia", b"minf", b"stbl", b"moof", b"traf"})


def declared_samples(fh: BinaryIO, max_boxes: int = 1 << 20) -> int:
    """The most samples any track of an ISO-BMFF file (MP4, MOV) declares: the largest `stsz`/`stz2` count, or the
    sum of the movie fragments' `trun` counts when larger. Read box headers only (seeking past every payload but the
    few bytes of those counts), for any layout, so a bound is checked before a sample table (here, or FFmpeg's
    index: ~24 bytes per sample) is allocated from a count a few bytes of header can set to 2^32. 0 for a file that
    is not ISO-BMFF; a file with more than `max_boxes` boxes counts as that many samples."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    most, fragments, boxes = 0, 0, 0
    stack = [(0, size)]
    while stack:
        off, end = stack.pop()
        while off + 8 <= end:
            boxes += 1
            if boxes > max_boxes:
                return max(most, fragments, max_boxes)
            fh.seek(off)
            head = fh.read(16)
            if len(head) < 8:
                break
            box, typ = struct.unpack_from(">I4s", head)
            hdr = 8
            if box == 1 and len(head) == 16:
                box, hdr = struct.unpack_from(">Q", head, 8)[0], 16
            elif box == 0:
                box = end - off
            if box < hdr:
                break
            stop = min(off + box, end)
            if typ in _DECLARING:
                stack.append((off + hdr, stop))
            elif typ in (b"stsz", b"stz2", b"trun"):
                fh.seek(off + hdr)
                payload = fh.read(12)
                if typ == b"trun" and len(payload) >= 8:
                    fragments += struct.unpack_from(">I", payload, 4)[0]
                elif len(payload) == 12:
                    most = max(most, struct.unpack_from(">I", payload, 8)[0])
            off += box
    return max(most, fragments)


class _Table:
    """What `_parse` found in a simple file's moov: the sample sizes, the time-to-sample runs, the edit (media
    time, end) or None, each sample's file offset, and the track's box spans in `moov`."""

    __slots__ = ("moov", "box", "sizes", "starts", "stts", "edit", "timing")

    def __init__(
        self, moov: bytes, box: dict, sizes: list[int], starts: list[int], stts, edit: tuple[int, int, tuple] | None
    ):
        self.moov, self.box, self.sizes, self.starts, self.stts = moov, box, sizes, starts, stts
        self.edit = None if edit is None else edit[:2]
        self.timing = None if edit is None else edit[2]  # _timing's answer, when the edit check computed it


def _parse(fh: BinaryIO) -> tuple[_Table, bytes] | None:
    try:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        ftyp, moov = _read_top(fh, size)
        key = hashlib.sha256(ftyp)
        return _count(moov, size, key), key.digest()
    except (_Unsupported, struct.error, IndexError, OSError, ValueError, OverflowError):
        return None


def _boxes(buf: bytes, start: int, end: int):
    """(type, payload start, payload end) of the boxes in buf[start:end]."""
    off = start
    while off < end:
        if off + 8 > end:
            raise _Unsupported("box header past its parent")
        size, typ = struct.unpack_from(">I4s", buf, off)
        hdr = 8
        if size == 1:
            size, hdr = struct.unpack_from(">Q", buf, off + 8)[0], 16
        if size < hdr or off + size > end:  # size 0 ("to the end") included
            raise _Unsupported("box size")
        yield typ, off + hdr, off + size
        off += size


def _read_top(fh: BinaryIO, size: int) -> tuple[bytes, bytes]:
    """The payloads of the file's ftyp (b"" when it has none) and of its only moov; mdat is skipped, never read."""
    found: dict[bytes, bytes] = {}
    off = 0
    while off < size:
        fh.seek(off)
        head = fh.read(16)
        if len(head) < 8:
            raise _Unsupported("truncated box header")
        box, typ = struct.unpack_from(">I4s", head)
        hdr = 8
        if box == 1:
            if len(head) < 16:
                raise _Unsupported("truncated box header")
            box, hdr = struct.unpack_from(">Q", head, 8)[0], 16
        if box < hdr or off + box > size:  # size 0 ("to the end of the file") or cut short
            raise _Unsupported("top-level box size")
        if typ not in _TOP:
            raise _Unsupported(f"top-level {typ!r} box")
        if typ in (b"ftyp", b"moov"):
            if typ in found or box - hdr > MAX_MOOV_BYTES:
                raise _Unsupported(f"several or large {typ!r} boxes")
            fh.seek(off + hdr)
            found[typ] = fh.read(box - hdr)
            if len(found[typ]) != box - hdr:
                raise _Unsupported("short read")
        off += box
    if b"moov" not in found:
        raise _Unsupported("no moov")
    return found.get(b"ftyp", b""), found[b"moov"]


def _version(buf: bytes, start: int) -> int:
    """A full box's version (0 or 1; FFmpeg refuses others in the boxes read here)."""
    if buf[start] > 1:
        raise _Unsupported("full-box version")
    return buf[start]


def _keyed(key, buf: bytes, typ: bytes, s: int, e: int) -> None:
    """Add a box to the header key: type and payload, without its per-file parts."""
    if typ in _PER_FILE:
        key.update(typ + buf[s : s + 4])
        return
    payload = bytearray(buf[s:e])
    for a, b in _TIMES.get(typ, {}).get(buf[s] if e > s else 0, ()):
        payload[a:b] = bytes(len(payload[a:b]))
    if typ == b"stsd":  # the visual sample entry's bitrate box (btrt) is per file
        entry = s + 8
        (size,) = struct.unpack_from(">I", buf, entry)
        if size < 86 or entry + size > e:
            raise _Unsupported("sample entry")
        for kid, ks, ke in _boxes(buf, entry + 86, entry + size):
            if kid == b"btrt":
                payload[ks - s : ke - s] = bytes(ke - ks)
    key.update(typ + struct.pack(">Q", e - s) + bytes(payload))


def _count(moov: bytes, file_size: int, key) -> _Table:
    kids = list(_boxes(moov, 0, len(moov)))
    for typ, s, e in kids:
        if typ not in _MOOV:
            raise _Unsupported(f"movie box {typ!r}")
        if typ != b"trak":
            _keyed(key, moov, typ, s, e)
    traks = [(s, e) for t, s, e in kids if t == b"trak"]
    mvhd = [(s, e) for t, s, e in kids if t == b"mvhd"]
    if len(traks) != 1 or len(mvhd) != 1:
        raise _Unsupported("not one track")
    v = _version(moov, mvhd[0][0])
    (movie_scale,) = struct.unpack_from(">I", moov, mvhd[0][0] + (20 if v == 1 else 12))
    box = _flatten(moov, *traks[0], key)
    s, e = box[b"hdlr"]
    if moov[s + 8 : s + 12] != b"vide":
        raise _Unsupported("not a video track")
    v = _version(moov, box[b"mdhd"][0])
    (media_scale,) = struct.unpack_from(">I", moov, box[b"mdhd"][0] + (20 if v == 1 else 12))
    s, _ = box[b"dref"]  # one data reference, in this file (FFmpeg does not follow others by default)
    if struct.unpack_from(">I", moov, s + 4)[0] != 1 or moov[s + 12 : s + 16] != b"url " or not moov[s + 19] & 1:
        raise _Unsupported("data reference")
    s, _ = box[b"stsd"]
    if struct.unpack_from(">I", moov, s + 4)[0] != 1:
        raise _Unsupported("sample descriptions")
    for typ in (b"stsz", b"stts", b"stsc", b"ctts", b"stss", b"elst", b"stco", b"co64"):
        if typ in box:
            _version(moov, box[typ][0])

    s, _ = box[b"stsz"]
    fixed, n = struct.unpack_from(">II", moov, s + 4)
    if fixed and n > file_size // fixed:  # (checked before any per-sample list is built from a damaged count)
        raise _Unsupported("more samples than the file holds")
    sizes = [fixed] * n if fixed else list(struct.unpack_from(f">{n}I", moov, s + 12))
    if not n or min(sizes) == 0 or max(sizes) > 0x3FFFFFFF:  # FFmpeg gives up on the index past that size
        raise _Unsupported("sample sizes")

    s, _ = box[b"stts"]
    (entries,) = struct.unpack_from(">I", moov, s + 4)
    stts = struct.unpack_from(f">{2 * entries}I", moov, s + 8)
    if not entries or sum(stts[0::2]) != n or min(stts[1::2]) == 0 or max(stts[1::2]) >= 1 << 31:
        raise _Unsupported("time-to-sample table")
    edit = None
    if b"edts" in box:
        edit = _check_edit(moov, box, movie_scale, media_scale, n, stts)
    elif b"elst" in box:
        raise _Unsupported("edit list outside edts")

    offsets = _chunk_offsets(moov, box)
    s, _ = box[b"stsc"]
    (entries,) = struct.unpack_from(">I", moov, s + 4)
    stsc = struct.unpack_from(f">{3 * entries}I", moov, s + 8)
    if not entries or stsc[0] != 1 or any(d != 1 for d in stsc[2::3]):
        raise _Unsupported("sample-to-chunk table")
    sample = 0
    starts: list[int] = []  # each sample's file offset
    for i in range(entries):
        first, per_chunk = stsc[3 * i], stsc[3 * i + 1]
        last = stsc[3 * (i + 1)] - 1 if i + 1 < entries else len(offsets)
        if per_chunk == 0 or last < first or last > len(offsets):
            raise _Unsupported("sample-to-chunk table")
        for chunk in range(first - 1, last):
            pos = offsets[chunk]
            for _ in range(per_chunk):
                if sample >= n:
                    raise _Unsupported("chunks hold more samples than stsz")
                starts.append(pos)
                pos += sizes[sample]
                sample += 1
            if pos > file_size:
                raise _Unsupported("sample bytes past the end of the file")
    if sample != n:
        raise _Unsupported("chunks hold fewer samples than stsz")
    return _Table(moov, box, sizes, starts, stts, edit)


def _flatten(buf: bytes, start: int, end: int, key) -> dict[bytes, tuple[int, int]]:
    """Payload spans of a track's boxes by type, walking trak/mdia/minf/stbl/edts/dinf in file order (each box
    added to the header key); a type seen twice or unknown here is refused."""
    out: dict[bytes, tuple[int, int]] = {}

    def walk(s: int, e: int) -> None:
        for typ, ps, pe in _boxes(buf, s, e):
            if typ not in _TRAK or typ in out:
                raise _Unsupported(f"track box {typ!r}")
            out[typ] = (ps, pe)
            if typ in _CONTAINERS:
                key.update(typ)
                walk(ps, pe)
            else:
                _keyed(key, buf, typ, ps, pe)

    walk(start, end)
    for need in (b"tkhd", b"mdhd", b"hdlr", b"dref", b"stsd", b"stsz", b"stts", b"stsc"):
        if need not in out:
            raise _Unsupported(f"no {need!r}")
    return out


def _chunk_offsets(buf: bytes, box: dict) -> tuple[int, ...]:
    if (b"stco" in box) == (b"co64" in box):
        raise _Unsupported("chunk offsets")
    typ = b"stco" if b"stco" in box else b"co64"
    s, _ = box[typ]
    (n,) = struct.unpack_from(">I", buf, s + 4)
    return struct.unpack_from(f">{n}{'I' if typ == b'stco' else 'Q'}", buf, s + 8)


def _expand(pairs) -> list[int]:
    """Run-length (count, value) pairs -> one value per sample."""
    out: list[int] = []
    for count, value in zip(pairs[0::2], pairs[1::2]):
        out += [value] * count
    return out


def _timing(buf: bytes, box: dict, n: int, stts) -> tuple[list[int], list[int], list[int]]:
    """Per sample, in decode order: dts (from 0), composition offset (0 without ctts), and the keyframe sample
    numbers (0-based; every sample without stss)."""
    dts = [0, *itertools.accumulate(_expand(stts))]
    del dts[n:]
    offsets = [0] * n
    if b"ctts" in box:
        s, _ = box[b"ctts"]
        (count,) = struct.unpack_from(">I", buf, s + 4)
        pairs = struct.unpack_from(f">{2 * count}i", buf, s + 8)  # FFmpeg reads them signed
        if sum(pairs[0::2]) != n or min(pairs[0::2], default=0) < 0:
            raise _Unsupported("composition offsets")
        offsets = _expand(pairs)
        if len(offsets) != n or min(offsets) < 0 or max(offsets) >= 1 << 28:  # FFmpeg drops a ctts past 2^28
            raise _Unsupported("composition offsets")
    if b"stss" in box:
        s, _ = box[b"stss"]
        (count,) = struct.unpack_from(">I", buf, s + 4)
        keys = [k - 1 for k in struct.unpack_from(f">{count}I", buf, s + 8)]
        if not keys or keys != sorted(set(keys)) or keys[0] < 0 or keys[-1] >= n:  # 1-based, increasing
            raise _Unsupported("sync samples")
    else:
        keys = list(range(n))  # no sync-sample table: every sample is a keyframe
    return dts, offsets, keys


# Sample entries whose packets FFmpeg's mov demuxer flags as keyframes from the sync-sample table itself (moving an
# stss entry moves the flag). For H.264 it runs its parser, and the flag is the parser's (an IDR slice): checked
# per keyframe in the file. Any other format (AV1 is parsed too) is demuxed.
_FLAGGED_FROM_STSS = frozenset({b"hvc1", b"hev1", b"mp4v"})
_AVC = frozenset({b"avc1", b"avc3"})
_IDR = 5
_MAX_NALS = 64  # NAL units walked in one sample before giving up on finding its picture


def _keyframes_are_flagged(fh: BinaryIO, table: _Table, keys: list[int]) -> bool:
    """Whether the packets the demuxer flags as keyframes are exactly the sync samples `keys` (as far as the seek
    index needs: every sync sample flagged; an IDR outside stss is harmless, FFmpeg's seek lands on stss samples)."""
    moov = table.moov
    s, _ = table.box[b"stsd"]
    entry = s + 8
    fmt = moov[entry + 4 : entry + 8]
    if fmt in _FLAGGED_FROM_STSS:
        return True
    if fmt not in _AVC:
        return False
    (size,) = struct.unpack_from(">I", moov, entry)
    length_size = None
    for kid, ks, _ke in _boxes(moov, entry + 86, entry + size):
        if kid == b"avcC":
            length_size = (moov[ks + 4] & 3) + 1
    if length_size not in (1, 2, 4):  # 3 is not a valid NAL length size
        return False
    return all(_starts_idr(fh, table.starts[k], table.sizes[k], length_size) for k in keys)


def _starts_idr(fh: BinaryIO, start: int, size: int, length_size: int) -> bool:
    """Whether the first picture (VCL) NAL unit of the length-prefixed H.264 sample at `start` is an IDR slice."""
    pos, end = start, start + size
    for _ in range(_MAX_NALS):
        if pos + length_size + 1 > end:
            return False
        fh.seek(pos)
        head = fh.read(length_size + 1)
        if len(head) != length_size + 1:
            return False
        length = int.from_bytes(head[:length_size], "big")
        kind = head[length_size] & 0x1F
        if 1 <= kind <= 5:
            return kind == _IDR
        if length == 0:
            return False
        pos += length_size + length
    return False


def _check_edit(buf: bytes, box: dict, movie_scale: int, media_scale: int, n: int, stts) -> tuple[int, int, tuple]:
    """Accept an edit list only where FFmpeg's (mov_fix_index) keeps every sample: one edit at rate 1 starting at
    the presentation time of sample 0, a keyframe, with no other keyframe decoded at or before that time (else the
    samples before the keyframe nearest the edit start are dropped), and no keyframe before the last sample ending
    at or past the edit's end (FFmpeg stops after such a keyframe). Samples it only flags for discard are counted:
    the demuxer still yields them. Returns (media time, edit end, `_timing` of the file)."""
    if b"elst" not in box or not movie_scale:
        raise _Unsupported("edit list")
    s, _ = box[b"elst"]
    v = _version(buf, s)
    (entries,) = struct.unpack_from(">I", buf, s + 4)
    if entries != 1:
        raise _Unsupported("edit list")
    duration, media_time, rate = struct.unpack_from(">QqI" if v == 1 else ">IiI", buf, s + 8)
    if rate != 1 << 16 or media_time < 0:
        raise _Unsupported("edit list")
    end = media_time + (duration * media_scale + movie_scale // 2) // movie_scale  # av_rescale rounds to nearest
    timing = _timing(buf, box, n, stts)
    dts, offsets, keys = timing
    dts = [*dts, dts[-1] + stts[-1]]  # and the end of the last sample
    if keys[0] != 0 or offsets[0] != media_time or any(dts[k] <= media_time for k in keys[1:]):
        raise _Unsupported("edit start")
    if any(k < n - 1 and dts[k + 1] + offsets[k] >= end for k in keys):  # cts + duration = next dts + offset
        raise _Unsupported("edit end")
    return media_time, end, timing
