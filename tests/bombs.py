"""Decompression bombs for the archive-limit tests, written in a few MB and a fraction of a second: a run of zeros is
deflated once per MiB with a full flush (so the block stands alone) and the block repeated; CRCs of the zero runs
are combined arithmetically (zlib's crc32_combine), never computed over the GiBs.

    tar_gz_bomb(path, before, bomb_name, gib, after)   a .tar.gz: members `before`, then `bomb_name` of zeros, `after`
    zip_bomb(path, members, bomb_name, gib, declared)  a .zip: deflated `members`, then `bomb_name` of zeros (its
                                                       headers may declare a smaller size: a member that lies)
    mp4_declaring(data, n)                             an MP4 (from a small one) whose track declares n one-byte
                                                       samples, written head first, the rest of the file sparse
"""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
from pathlib import Path

MIB = 1 << 20


def _gf2_times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc(A), crc(B) and len(B) (a port of zlib's crc32_combine)."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _zeros(mib: int) -> tuple[bytes, int]:
    """(raw deflate of `mib` MiB of zeros, not final, ending byte-aligned; its CRC-32)."""
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = co.compress(bytes(MIB)) + co.flush(zlib.Z_FULL_FLUSH)
    crc_mib = zlib.crc32(bytes(MIB))
    crc, done, step, step_crc = 0, 0, 1, crc_mib
    k = mib
    while k:  # crc of mib MiB of zeros by doubling
        if k & 1:
            crc = crc32_combine(crc, step_crc, step * MIB) if done else step_crc
            done += step
        step_crc = crc32_combine(step_crc, step_crc, step * MIB)
        step *= 2
        k >>= 1
    return block * mib, crc


def _deflate(data: bytes, final: bool) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, -15)
    return co.compress(data) + co.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)


def _tar_member(name: str, data: bytes | None, size: int | None = None) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size = len(data) if data is not None else size
    ti.mode = 0o644
    head = ti.tobuf(format=tarfile.GNU_FORMAT)
    if data is None:
        return head
    return head + data + bytes(-len(data) % 512)


def tar_gz_bomb(path: Path, before: dict[str, bytes], bomb_name: str, gib: float,
                after: dict[str, bytes] | None = None) -> int:
    """Write the archive; returns the bomb member's size."""
    mib = int(gib * 1024)
    prefix = b"".join(_tar_member(n, d) for n, d in before.items()) + _tar_member(bomb_name, None, mib * MIB)
    suffix = b"".join(_tar_member(n, d) for n, d in (after or {}).items()) + bytes(1024)
    zeros, zcrc = _zeros(mib)
    crc = crc32_combine(crc32_combine(zlib.crc32(prefix), zcrc, mib * MIB), zlib.crc32(suffix), len(suffix))
    total = len(prefix) + mib * MIB + len(suffix)
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
        fh.write(_deflate(prefix, final=False))
        fh.write(zeros)
        fh.write(_deflate(suffix, final=True))
        fh.write(struct.pack("<II", crc, total & 0xFFFFFFFF))
    return mib * MIB


def zip_bomb(path: Path, members: dict[str, bytes], bomb_name: str, gib: float, declared: int | None = None) -> int:
    """Write the zip (members deflated, then the bomb member, whose headers say `declared` bytes if given); returns
    the bomb member's real size (< 4 GiB: no zip64)."""
    mib = int(gib * 1024)
    entries = []
    for name, data in members.items():
        entries.append((name, _deflate(data, final=True), zlib.crc32(data), len(data)))
    zeros, zcrc = _zeros(mib)
    entries.append((bomb_name, zeros + b"\x03\x00", zcrc, mib * MIB if declared is None else declared))
    out = io.BytesIO()
    central = []
    for name, comp, crc, size in entries:
        raw = name.encode()
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(comp),
                                   size, len(raw), 0, 0, 0, 0, 0, out.tell()) + raw)
        out.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(comp), size, len(raw), 0))
        out.write(raw)
        out.write(comp)
    cd_offset = out.tell()
    cd = b"".join(central)
    out.write(cd)
    out.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(cd), cd_offset, 0))
    Path(path).write_bytes(out.getvalue())
    return mib * MIB


def mp4_declaring(data: bytes, n: int) -> tuple[bytes, int]:
    """(head of an MP4 whose one track declares `n` one-byte samples in one chunk, the file size that needs): from a
    small plain MP4 (ftyp, free, mdat, moov as ffmpeg writes them), moov moved before mdat and its sample tables
    made consistent (stsz fixed size 1, one stts run, one stsc run, one chunk at mdat's start), mdat sized to hold
    the n samples. Write the head and truncate the file up to the size: a few KB on disk, a sparse file."""
    boxes, off = {}, 0
    while off < len(data):
        size, typ = struct.unpack_from(">I4s", data, off)
        boxes[typ] = data[off:off + size]
        off += size
    moov = bytearray(boxes[b"moov"])

    def payload(typ: bytes) -> int:
        return moov.find(typ) + 4

    s = payload(b"stsz")
    moov[s + 4:s + 12] = struct.pack(">II", 1, n)
    s = payload(b"stts")
    delta = struct.unpack_from(">I", moov, s + 12)[0]
    moov[s + 4:s + 16] = struct.pack(">III", 1, n, delta)
    s = payload(b"stsc")
    moov[s + 4:s + 20] = struct.pack(">IIII", 1, 1, n, 1)
    head = boxes[b"ftyp"] + boxes.get(b"free", b"")
    mdat_at = len(head) + len(moov)
    s = payload(b"stco")
    moov[s + 4:s + 12] = struct.pack(">II", 1, mdat_at + 8)
    mdat = struct.pack(">I4s", 8 + n, b"mdat") + boxes[b"mdat"][8:]
    return bytes(head + moov + mdat), mdat_at + 8 + n
