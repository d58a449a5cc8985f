"""Decompression bombs for the archive-limit tests, written in a few MB and a fraction of a second: a run of zeros is
deflated once per MiB with a full flush (so the block stands alone) and the block repeated; CRCs of the zero runs
are combined arithmetically (zlib's crc32_combine), never computed over the GiBs.

    tar_gz_bomb(path, before, bomb_name, gib, after)   a .tar.gz: members `before`, then `bomb_name` of zeros, `after`
    zip_bomb(path, members, bomb_name, gib, declared)  a .zip: deflated `members`, then `bomb_name` of zeros (its
                                                       headers may declare a smaller size: a member that lies)
    mp4_declaring(data, n)                             an MP4 (from a small one) whose track declares n one-byte
                                                       samples, written head first, the rest of the file sparse
    probe(slug, root, bad, good, ...)                  read a bomb's unit and a good one in a fresh process under a
                                                       memory limit; what happened and the peak RSS

Every bomb is read under the same limit: HEADROOM of address space (RLIMIT_AS) above what the probe process holds
after its imports, and its peak RSS must stay under PEAK_LIMIT_KB (1 GiB). With PROCESSBENCH_BOMB_LOG set to a file,
each probe appends one JSON line (test, slug, outcome, peak): bench/fault_campaign.py prints them as its bomb table.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[1]
HEADROOM = 1 << 30  # address space a probe may take above its baseline after imports
PEAK_LIMIT_KB = 1 << 20  # 1 GiB: every bomb's peak RSS stays under it
LOG_ENV = "PROCESSBENCH_BOMB_LOG"

# Reads the bad unit (and, with frames, one frame of it) and the good unit (and one frame) in a fresh process whose
# address space is capped at HEADROOM above what the imports took, with the configured adapter options (input
# limits overridden by `over`); prints what happened, the peak RSS and how many temp files were opened as JSON.
_PROBE = """
import json, resource, sys, tempfile
from pathlib import Path
opened = []
_tf = tempfile.TemporaryFile
tempfile.TemporaryFile = lambda *a, **k: opened.append(1) or _tf(*a, **k)
from pipeline.settings.config import load_settings
from upstream_adapters import get_adapter
from upstream_adapters.ir import UnitError
slug, root, bad, good, over, headroom, frames = sys.argv[1:8]
opts = load_settings().sources[slug].adapter.options()
opts["input_limits"].update(json.loads(over))
a = get_adapter(slug, **opts)
out = {"ids": a.discover(Path(root))}
status = open("/proc/self/status").read().splitlines()
vm = int(next(l for l in status if l.startswith("VmSize")).split()[1]) * 1024
out["baseline_rss_kb"] = int(next(l for l in status if l.startswith("VmRSS")).split()[1])
resource.setrlimit(resource.RLIMIT_AS, (vm + int(headroom), resource.RLIM_INFINITY))
calls = [("bad", lambda: a.read_unit(Path(root), bad))]
calls += [("bad_frames", lambda: a.read_frames(Path(root), bad, a.camera, [0]))] if frames == "1" else []
for what, call in calls:
    try:
        call()
        out[what] = None
    except UnitError as e:
        out[what], out[what + "_file"] = e.reason, e.file
    except MemoryError:
        out[what] = "MemoryError"
    except Exception as e:  # what an unbounded read dies of (OpenCV's failed allocation, ...)
        out[what] = f"{type(e).__name__}: {e}"[-300:]
out["good_frames"] = a.read_unit(Path(root), good).unit["num_frames"]
out["good_decoded"] = len(a.read_frames(Path(root), good, a.camera, [0]))
out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out["temp_files"] = len(opened)
print(json.dumps(out))
"""


def probe(slug: str, root: Path, bad: str, good: str, *, frames: bool = True, lifted: bool = False, **over) -> dict:
    """Read unit `bad` (a bomb) and unit `good` of `root` in a fresh process under the memory limit; returns what
    happened: `bad` (the UnitError's reason, "MemoryError", or None if it read), `bad_file`, `bad_frames` (with
    frames), `good_frames` / `good_decoded`, `maxrss_kb` (the process's peak RSS), `temp_files`. `over` overrides
    input limits; `lifted=True` says a bound was lifted to reproduce the fault (its peak is not held to the limit)."""
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            slug,
            str(root),
            bad,
            good,
            json.dumps(over),
            str(HEADROOM),
            "1" if frames else "0",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-2000:]}"
    got = json.loads(res.stdout.strip().splitlines()[-1])
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps(
                    {
                        "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                        "slug": slug,
                        "lifted": lifted,
                        "bad": got.get("bad"),
                        "maxrss_kb": got["maxrss_kb"],
                        "baseline_rss_kb": got["baseline_rss_kb"],
                        "headroom": HEADROOM,
                    }
                )
                + "\n"
            )
    if not lifted:
        assert got["maxrss_kb"] < PEAK_LIMIT_KB, f"peak RSS {got['maxrss_kb']} kB"
    return got


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


def tar_gz_bomb(
    path: Path, before: dict[str, bytes], bomb_name: str, gib: float, after: dict[str, bytes] | None = None
) -> int:
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
        central.append(
            struct.pack(
                "<4sHHHHHHIIIHHHHHII",
                b"PK\x01\x02",
                20,
                20,
                0,
                8,
                0,
                0x21,
                crc,
                len(comp),
                size,
                len(raw),
                0,
                0,
                0,
                0,
                0,
                out.tell(),
            )
            + raw
        )
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
        boxes[typ] = data[off : off + size]
        off += size
    moov = bytearray(boxes[b"moov"])

    def payload(typ: bytes) -> int:
        return moov.find(typ) + 4

    s = payload(b"stsz")
    moov[s + 4 : s + 12] = struct.pack(">II", 1, n)
    s = payload(b"stts")
    delta = struct.unpack_from(">I", moov, s + 12)[0]
    moov[s + 4 : s + 16] = struct.pack(">III", 1, n, delta)
    s = payload(b"stsc")
    moov[s + 4 : s + 20] = struct.pack(">IIII", 1, 1, n, 1)
    head = boxes[b"ftyp"] + boxes.get(b"free", b"")
    mdat_at = len(head) + len(moov)
    s = payload(b"stco")
    moov[s + 4 : s + 12] = struct.pack(">II", 1, mdat_at + 8)
    mdat = struct.pack(">I4s", 8 + n, b"mdat") + boxes[b"mdat"][8:]
    return bytes(head + moov + mdat), mdat_at + 8 + n
