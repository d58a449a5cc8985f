"""upstream_adapters/media/mp4_index.py, video.count_frames' fast path: the frame count read from an MP4's sample table is
the count PyAV's demuxer gives, on every codec, and a file the table cannot vouch for (cut short, damaged header,
an edit list FFmpeg cuts) gets exactly what the demuxer says, an error included."""

from __future__ import annotations

import io
import struct

import pytest

from upstream_adapters.media import mp4_index
from upstream_adapters.media import video
from upstream_adapters.samples.common import decode_frame_index, encode_video, render_frame

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


def _result(fn, *args):
    """fn(*args), or the error it raised as (type name, message): whatever the demuxer raises is an outcome to
    compare."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error itself is what the test compares
        return type(exc).__name__, str(exc)


def _demuxed(src):
    """What PyAV's demux pass says: the frame count, or the error."""
    return _result(lambda: video.probe(src).num_frames)


def _counted(src):
    return _result(video.count_frames, src)


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


# ------------------------------------------------------------------ the seek index read_frames uses (sample_index)


def _seek_index(src):
    """What read_frames seeks by for `src` (through the table once its header agreed), or the error."""

    def index():
        data = video._materialize(src)
        with video._open(data) as c:
            return video._seek_index(c, data)

    return _result(index)


def _demuxed_index(src):
    return _result(video.probe, src)


@pytest.fixture(autouse=True)
def fresh_index_agreement(monkeypatch):
    monkeypatch.setattr(video, "_INDEX_AGREED", {})


@pytest.mark.parametrize("codec", ["h264", "hevc", "mpeg4"])
def test_table_index_is_the_demuxers_index(clips, codec, tmp_path, monkeypatch):
    """pts and keyframes from stts/ctts/stss (and the edit list's shift) are the demuxer's, open-GOP HEVC included;
    once a header agreed, read_frames no longer demuxes and still decodes every frame as itself."""
    data = clips[codec]
    path = tmp_path / "clip.mp4"
    path.write_bytes(data)
    want = video.probe(data)
    assert _seek_index(path) == want and list(video._INDEX_AGREED.values()) == [True]  # demuxed and compared
    demuxes = []
    real = video._index_container
    monkeypatch.setattr(video, "_index_container", lambda c: demuxes.append(1) or real(c))
    for src in (path, data, _faststart(data)):
        assert _seek_index(src) == want
        got = video.read_frames(src, [0, GOP - 1, GOP, N - 1])
        assert [decode_frame_index(got[i]) for i in sorted(got)] == [0, GOP - 1, GOP, N - 1]
    assert demuxes == []


def test_av1_is_demuxed(clips):
    """FFmpeg parses AV1 packets and flags keyframes from their headers: no index from the table."""
    data = clips["av1"]
    assert mp4_index.sample_count(io.BytesIO(data)) is not None
    assert mp4_index.sample_index(io.BytesIO(data)) is None


def test_a_table_index_the_demuxer_disagrees_with_is_never_used(clips, monkeypatch):
    """Planted: the table reads one frame late. The first file of the header is demuxed and disagrees, so every
    later file of that header is demuxed too and decodes right."""
    real = mp4_index.sample_index

    def late(fh):
        got = real(fh)
        return None if got is None else ([p + 512 for p in got[0]], got[1], got[2])

    monkeypatch.setattr(mp4_index, "sample_index", late)
    data = clips["h264"]
    for _ in range(2):
        assert _seek_index(data) == video.probe(data)
        got = video.read_frames(data, [0, 1, N - 1])
        assert [decode_frame_index(got[i]) for i in (0, 1, N - 1)] == [0, 1, N - 1]
    assert list(video._INDEX_AGREED.values()) == [False]


def test_edit_lists_the_shift_does_not_explain_get_no_table_index(clips):
    """An edit starting after the first sample's time (FFmpeg drops or flags samples), one ending before the last
    sample's time (flagged for discard), and one FFmpeg cuts short: no index from the table, the demuxer's used."""
    data = clips["h264"]
    assert _seek_index(data) == video.probe(data)
    at = data.find(b"elst")
    (duration, media_time) = struct.unpack_from(">Ii", data, at + 12)
    late_start, early_end, cut = bytearray(data), bytearray(data), bytearray(data)
    struct.pack_into(">i", late_start, at + 16, media_time + 512)
    struct.pack_into(">I", early_end, at + 12, duration - 40)  # the last frame (33 ms) ends past the edit
    struct.pack_into(">I", cut, at + 12, 100)
    for bad in (late_start, early_end, cut):
        bad = bytes(bad)
        assert mp4_index.sample_index(io.BytesIO(bad)) is None
        assert _seek_index(bad) == _demuxed_index(bad)


def test_fragmented_file_gets_no_table_index(clips):
    """A fragmented MP4 (moof boxes) is demuxed: the table does not hold its samples."""
    import av

    frames = [render_frame(i, 96, 64, (i / N, 0.5)) for i in range(20)]
    out = io.BytesIO()
    with av.open(out, "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov"}) as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 96, 64, "yuv420p"
        for img in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    data = out.getvalue()
    assert b"moof" in data and mp4_index.sample_index(io.BytesIO(data)) is None
    assert _seek_index(data) == video.probe(data) and video.probe(data).num_frames == 20


def test_h264_sync_samples_that_are_not_idr_get_no_table_index(clips):
    """FFmpeg flags an H.264 packet as a keyframe from its content (an IDR slice), not from stss: a sync-sample table
    naming a non-IDR sample gives no index from the table (the demuxer flags the real IDR)."""
    data = clips["h264"]
    assert _seek_index(data) == video.probe(data)
    bad = bytearray(data)
    at = bad.find(b"stss")
    (count,) = struct.unpack_from(">I", bad, at + 8)
    (last,) = struct.unpack_from(">I", bad, at + 8 + 4 * count)
    struct.pack_into(">I", bad, at + 8 + 4 * count, last + 1)  # the last sync sample one later: a P/B picture
    bad = bytes(bad)
    assert mp4_index.sample_index(io.BytesIO(bad)) is None
    assert _seek_index(bad) == video.probe(bad)


def _outcome(src, want):
    """read_frames' pixels (as bytes) or the error class."""
    try:
        return {i: a.tobytes() for i, a in video.read_frames(src, want).items()}
    except video.DecodeError:
        return "DecodeError"


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_damaged_header_bytes_decode_as_with_the_demuxers_index(clips, codec, monkeypatch):
    """Every third byte of ftyp and moov set to other values, after the clean header agreed: read_frames gives the
    pixels it gives with the demuxer's index, or fails as it does, also where the damage is in the tables the index
    is read from (the error text may name another pts: the seek went elsewhere before the damage showed)."""
    data = clips[codec]
    _seek_index(data)
    boxes = _top_boxes(data)
    positions = [*range(*boxes[b"ftyp"]), *range(*boxes[b"moov"])]
    wants = ([0, GOP - 1, GOP, GOP + 1, N - 1], [N // 2])
    answered = 0
    for k, pos in enumerate(positions[::3]):
        bad = bytearray(data)
        bad[pos] = (bad[pos] + (1, 0x80, 0x7F)[k % 3]) % 256
        bad = bytes(bad)
        table = mp4_index.sample_index(io.BytesIO(bad))
        if table is None or not video._INDEX_AGREED.get(table[2]):
            continue
        answered += 1
        got = [_outcome(bad, w) for w in wants]
        with monkeypatch.context() as m:
            m.setattr(mp4_index, "sample_index", lambda fh: None)
            assert got == [_outcome(bad, w) for w in wants], pos
    assert answered  # the table answered for some (damage in per-file fields it checks itself)
