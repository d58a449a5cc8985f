"""upstream_adapters/mp4_index.py, video.count_frames' fast path: the frame count read from an MP4's sample table is
the count PyAV's demuxer gives, on every codec, and a file the table cannot vouch for (cut short, damaged header,
an edit list FFmpeg cuts) gets exactly what the demuxer says, an error included."""

from __future__ import annotations

import io
import struct

import pytest

from upstream_adapters import mp4_index, video
from upstream_adapters.samples.common import encode_video, render_frame

N = 60
GOP = 20
CODECS = ["h264", "hevc", "av1", "mpeg4"]


@pytest.fixture(scope="module")
def clips() -> dict[str, bytes]:
    """One small clip per codec, as the sample corpora write them (moov after mdat; H.264/HEVC with B-frames and an
    edit list)."""
    frames = [render_frame(i, 96, 64, (i / N, 0.5)) for i in range(N)]
    return {codec: encode_video(frames, 30, codec=codec, gop=GOP, bframes=True) for codec in CODECS}


@pytest.fixture(autouse=True)
def fresh_agreement(monkeypatch):
    monkeypatch.setattr(video, "_AGREED", {})


def _demuxed(src):
    """What PyAV's demux pass says: the frame count, or the error."""
    try:
        return video.probe(src).num_frames
    except Exception as exc:  # noqa: BLE001 - whatever the demuxer raises is the expected outcome
        return type(exc).__name__, str(exc)


def _counted(src):
    try:
        return video.count_frames(src)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc)


def _top_boxes(data: bytes) -> dict[bytes, tuple[int, int]]:
    out, off = {}, 0
    while off < len(data):
        size, typ = struct.unpack_from(">I4s", data, off)
        out[typ] = (off, off + size)
        off += size
    return out


def _faststart(data: bytes) -> bytes:
    """The same clip with moov before mdat (chunk offsets moved), as `-movflags faststart` writes it."""
    boxes = _top_boxes(data)
    ms, me = boxes[b"moov"]
    moov = bytearray(data[ms:me])
    at = moov.find(b"stco")
    (n,) = struct.unpack_from(">I", moov, at + 8)
    for i in range(n):
        (o,) = struct.unpack_from(">I", moov, at + 12 + 4 * i)
        struct.pack_into(">I", moov, at + 12 + 4 * i, o + len(moov))
    fs, fe = boxes[b"ftyp"]
    rest = data[fe:ms] + data[me:]
    return data[fs:fe] + bytes(moov) + rest


@pytest.mark.parametrize("codec", CODECS)
def test_table_count_is_the_demuxers_count(clips, codec, tmp_path):
    data = clips[codec]
    path = tmp_path / "clip.mp4"
    path.write_bytes(data)
    got = mp4_index.sample_count(open(path, "rb"))
    assert got is not None and got[0] == N == video.probe(path).num_frames
    assert mp4_index.sample_count(open(path, "rb"))[1] == got[1]  # the header key is stable
    assert video.count_frames(path) == N and video._AGREED == {got[1]: True}
    assert video.count_frames(data) == N == video.count_frames(_faststart(data))


def test_agreed_header_skips_the_demuxer_but_a_new_header_does_not(clips, monkeypatch):
    calls = []
    real = video.probe
    monkeypatch.setattr(video, "probe", lambda src: calls.append(1) or real(src))
    data = clips["h264"]
    assert video.count_frames(data) == N and len(calls) == 1  # first of its header: demuxed
    assert video.count_frames(data) == N and len(calls) == 1  # same header: from the sample table
    assert video.count_frames(clips["av1"]) == N and len(calls) == 2


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_cut_short_files_get_the_demuxers_answer(clips, codec):
    for data in (clips[codec], _faststart(clips[codec])):
        video.count_frames(data)  # the header is agreed: only the table's own checks stand between
        for keep in (0, 8, 100, len(data) // 3, len(data) // 2, len(data) - 300, len(data) - 1):
            cut = data[:keep]
            assert _counted(cut) == _demuxed(cut), keep
    cut = _faststart(clips[codec])[: len(clips[codec]) // 2]  # index intact, the last samples' bytes missing
    assert mp4_index.sample_count(io.BytesIO(cut)) is None


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_damaged_header_bytes_get_the_demuxers_answer(clips, codec):
    """Every byte of ftyp and moov in turn set to other values: the count (or error) is always the demuxer's, also
    where the damage is in what FFmpeg alone reads (codec configuration, metadata text PyAV decodes)."""
    data = clips[codec]
    video.count_frames(data)
    boxes = _top_boxes(data)
    positions = [*range(*boxes[b"ftyp"]), *range(*boxes[b"moov"])]
    answered = 0
    for k, pos in enumerate(positions[::3]):
        bad = bytearray(data)
        bad[pos] = (bad[pos] + (1, 0x80, 0x7F)[k % 3]) % 256
        bad = bytes(bad)
        assert _counted(bad) == _demuxed(bad), pos
        table = mp4_index.sample_count(io.BytesIO(bad))
        answered += table is not None and video._AGREED.get(table[1], False)
    assert answered  # the fast path did answer for some of them (damage in per-file fields it checks itself)


def test_edit_list_ffmpeg_cuts_is_demuxed(clips):
    """An edit list ending early: FFmpeg stops after the second keyframe past its end, so the demuxer yields fewer
    packets than the sample table holds; the count must be the demuxer's."""
    data = bytearray(clips["h264"])
    video.count_frames(bytes(data))
    at = data.find(b"elst")
    version = data[at + 4]
    assert version == 0
    struct.pack_into(">I", data, at + 12, 100)  # segment duration: 0.1 s of the movie timescale (1000)
    short = bytes(data)
    want = video.probe(short).num_frames
    assert want < N
    assert video.count_frames(short) == want
