"""Frame-exact decoding of a list of frame indices from one video (file path or in-memory MP4 bytes).

The decoder interface every adapter uses for container video (GM-100 mp4 files, RH20T color.mp4 in a folder or
a tar, REASSEMBLE MP4 blobs in HDF5). Returns RGB uint8 arrays (H x W x 3) keyed by frame index.

Frame index i is the i-th frame in presentation order: the i-th smallest pts among the video stream's packets
(the same packets `count_frames` counts). Two decoders, chosen per video (docs/engineering.md, decoders):

- **PyAV** with an exact-timestamp seek, on every codec (H.264, HEVC, AV1, mpeg4, ...): index pts once (from a
  plain MP4's sample table where a file of its header agreed with the demuxer, `_seek_index`, else by demuxing);
  for each wanted frame (sorted) seek to the last keyframe <= its pts, or keep decoding forward when no
  keyframe lies in between (so dense selections decode sequentially, one pass per GOP); accept a frame only when
  its pts equals the target; on overshoot (open-GOP leading pictures dropped after a seek) retry from the previous
  keyframe; as a last resort decode from the start. RGB conversion only for the wanted frames; unwanted
  non-reference pictures are not decoded at all where the decoder allows it (`_decode_run`).
- **decord** `get_batch`: cannot open AV1 and returns wrong frames around open-GOP keyframes (x265 CRA pictures,
  x264 --open-gop), so it is eligible only for `DECORD_SAFE_CODECS` when the demuxed index shows no leading
  pictures and its frame count agrees with ours. Measured here it was slower than the PyAV path on every codec and
  selection pattern (1.5-7x; dense selections worst), so `auto` uses it as the fallback, not the first choice.

Both produce bit-identical RGB on the codecs tested (swscale yuv420p -> rgb24); `DECODER_VERSION` names this
logic and is part of every frame-cache key.
"""

from __future__ import annotations

import bisect
import functools
import importlib.metadata
import importlib.util
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence, Union

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from upstream_adapters.media import mp4_index

VideoSource = Union[str, Path, bytes, bytearray, memoryview, BinaryIO]

DECODER_VERSION = "pbvideo-2"
DECODERS = ("auto", "decord", "pyav")
# Codecs on which decord's get_batch was measured frame-exact (closed GOP). Open GOP is detected per video.
DECORD_SAFE_CODECS = frozenset({"h264", "mpeg4", "mjpeg", "vp9"})
# Decoders that honour skip_frame per packet (measured bit-identical on the wanted frames). libdav1d (AV1) reads it
# once when the codec opens, which would drop wanted non-reference frames for the whole video: not listed.
SKIP_NONREF_CODECS = frozenset({"h264", "hevc", "mpeg4"})

# decord is an optional fast path (no macOS / Linux-aarch64 wheels), imported lazily: its wheel loads a bundled
# zlib 1.2.3 into the global symbol namespace, and when that happens before OpenCV is loaded, cv2's PNG decoding fails
# ("libpng error: bad parameters to zlib"). `_load_decord` therefore imports cv2 first.
_decord = None
_decord_tried = False


def _load_decord():
    global _decord, _decord_tried
    if not _decord_tried:
        _decord_tried = True
        try:
            import cv2  # noqa: F401 - must be loaded before decord, see above

            import decord  # type: ignore

            _decord = decord
        except Exception:  # noqa: BLE001 - pragma: no cover: a broken decord install of any kind means "no decord"
            _decord = None
    return _decord


def _decord_version() -> str:
    try:
        return importlib.metadata.version("decord")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "none"


class DecodeError(Exception):
    pass


@dataclass(frozen=True)
class VideoIndex:
    """What one demux pass (no decoding) tells about the first video stream."""

    codec: str
    pts: tuple[int, ...]  # presentation timestamps of all frames, sorted: frame i <-> pts[i]
    keys: tuple[int, ...]  # pts of keyframe packets, sorted
    open_gop: bool  # some packet after a keyframe (decode order) is presented before it (leading pictures)
    time_base: tuple[int, int]
    width: int
    height: int

    @property
    def num_frames(self) -> int:
        return len(self.pts)


def decoder_id(decoder: str = "auto") -> str:
    """Identifies decoder logic + library versions: part of every cache key built on these frames."""
    return f"{DECODER_VERSION}|{decoder}|av={av.__version__}|decord={_decord_version()}"


def _materialize(src: VideoSource) -> str | bytes:
    """A path string or a bytes object (file-like sources are read once, so both decoders can reopen them)."""
    if isinstance(src, Path):
        return str(src)
    if isinstance(src, str):
        return src
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    if hasattr(src, "read"):
        if hasattr(src, "seek"):
            src.seek(0)
        return src.read()
    raise DecodeError(f"unsupported video source type {type(src).__name__}")


def _open(src: str | bytes):
    try:
        return av.open(io.BytesIO(src) if isinstance(src, bytes) else src)
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise DecodeError(f"cannot open video: {exc}") from exc


def _video_stream(c):
    if not c.streams.video:
        raise DecodeError("no video stream")
    return c.streams.video[0]


def _index_container(c) -> VideoIndex:
    """The index from one demux pass over every packet of the video stream (no decoding)."""
    s = _video_stream(c)
    pts_dec: list[int] = []
    key_pos: list[int] = []
    try:
        for p in c.demux(s):
            if not p.size or p.pts is None:
                continue
            if p.is_keyframe:
                key_pos.append(len(pts_dec))
            pts_dec.append(p.pts)
    except av.FFmpegError as exc:
        raise DecodeError(f"cannot demux video: {exc}") from exc
    return _build_index(s, pts_dec, key_pos)


def _build_index(s, pts_dec: list[int], key_pos: list[int]) -> VideoIndex:
    """A VideoIndex from the packets' pts in decode order and the positions of the keyframes among them; codec,
    time base and size from the opened stream."""
    open_gop = False
    if key_pos:
        # suffix minimum of pts in decode order: a keyframe followed by an earlier-presented packet has leading pictures
        suffix_min = [0] * (len(pts_dec) + 1)
        m = float("inf")
        for j in range(len(pts_dec) - 1, -1, -1):
            m = min(m, pts_dec[j])
            suffix_min[j] = m
        suffix_min[len(pts_dec)] = float("inf")
        open_gop = any(suffix_min[j + 1] < pts_dec[j] for j in key_pos)
    tb = s.time_base
    cc = s.codec_context
    return VideoIndex(
        codec=cc.name or "",
        pts=tuple(sorted(pts_dec)),
        keys=tuple(sorted(pts_dec[j] for j in key_pos)),
        open_gop=open_gop,
        time_base=(tb.numerator, tb.denominator) if tb is not None else (0, 1),
        width=int(cc.width or 0),
        height=int(cc.height or 0),
    )


def _seek_index(c, data: str | bytes) -> VideoIndex:
    """The index `read_frames` seeks by: from a plain MP4's sample table (mp4_index.sample_index) once a file of
    the same header has been demuxed in this process and gave exactly the table's pts and keyframes (~0.2 ms
    instead of ~0.75 ms for the demux pass of a GM-100 video), else from the demux pass. The first video of each
    header is demuxed and compared; a disagreement keeps that header on the demux pass for good."""
    table = _table(data, mp4_index.sample_index)
    if table is not None:
        pts_dec, key_pos, key = table
        if _INDEX_AGREED.get(key):
            return _build_index(_video_stream(c), pts_dec, key_pos)
    index = _index_container(c)
    if table is not None and len(_INDEX_AGREED) < _AGREED_MAX:
        _INDEX_AGREED[key] = index == _build_index(_video_stream(c), pts_dec, key_pos)
    return index


def check_declared(src: VideoSource, max_samples: int | None) -> None:
    """DecodeError when the video's container declares more samples for a track than `max_samples`
    (input_limits.max_video_samples): checked from the box headers (mp4_index.declared_samples) before the sample
    table or FFmpeg's index is built from the declared count. None: no bound."""
    if max_samples is None:
        return
    n = _table(src, lambda fh: mp4_index.declared_samples(fh, max_boxes=max_samples + 1))
    if n is not None and n > max_samples:
        raise DecodeError(
            f"video declares {n} samples in one track, over input_limits.max_video_samples "
            f"({max_samples}): refused before indexing"
        )


def probe(src: VideoSource) -> VideoIndex:
    """Demux `src` once (no decoding) and return its frame index."""
    data = _materialize(src)
    with _open(data) as c:
        return _index_container(c)


def count_frames(src: VideoSource, max_samples: int | None = None) -> int:
    """Exact number of decodable frames (counts packets of the video stream without decoding). A plain MP4 is
    answered from its sample table (mp4_index) once PyAV has opened a file of the same header and agreed with the
    table's count; any other file is demuxed. `max_samples`: `check_declared` first."""
    check_declared(src, max_samples)
    table = _table_count(src)
    if table is not None and _AGREED.get(table[1]):
        return table[0]
    n = probe(src).num_frames  # raises DecodeError for a file FFmpeg cannot open or demux, as before
    if table is not None and len(_AGREED) < _AGREED_MAX:
        _AGREED[table[1]] = n == table[0]
    return n


def check_first_frame(src: VideoSource, max_samples: int | None = None) -> None:
    """Raise DecodeError unless the video opens and the decoder puts out a first frame: what ingest checks before
    trusting a video (its frame count comes from `count_frames`). Nothing is demuxed ahead, seeked or converted
    to RGB: `read_frames(src, [0])` did the same check at ~3x the cost (a demux of every packet to index the
    video first). One decoder thread: FFmpeg's default (as many as cores) costs more to set up than one frame."""
    data = _materialize(src)
    check_declared(data, max_samples)
    with _open(data) as c:
        s = _video_stream(c)
        s.codec_context.thread_count = 1
        try:
            for _frame in c.decode(s):
                return
        except av.FFmpegError as exc:
            raise DecodeError(f"first frame does not decode: {exc}") from exc
    raise DecodeError("no frame decodes")


# mp4_index header key -> whether PyAV opened a file with that header and counted what its sample table says.
# The count is the same either way; the key only decides whether a file must be demuxed to know it.
_AGREED: dict[bytes, bool] = {}
_AGREED_MAX = 4096


# mp4_index header key -> whether the demux pass of a file with that header gave the sample table's seek index
_INDEX_AGREED: dict[bytes, bool] = {}


def _table_count(src: VideoSource) -> tuple[int, bytes] | None:
    return _table(src, mp4_index.sample_count)


def _table(src: VideoSource, read):
    """`read` (an mp4_index reader) over a path or bytes; None for a stream, a non-regular file or an unreadable
    path (the demuxer then says why)."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return read(io.BytesIO(src))
    if not isinstance(src, (str, Path)):
        return None  # a stream: read once, by probe
    try:
        if not stat.S_ISREG(os.stat(src).st_mode):  # a FIFO or device: never opened here
            return None
        with open(src, "rb") as fh:
            return read(fh)
    except OSError:
        return None  # probe says why


def decoder_order(index: VideoIndex, decoder: str = "auto") -> list[str]:
    """The decoders `read_frames` tries, in order, for a video with this index.

    auto: PyAV's exact seek first (measured faster than decord's get_batch on every codec and selection pattern
    tried, see bench/bench_frames.py), then decord where it is exact (safe codec, closed GOP) as a fallback.
    """
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {DECODERS}, got {decoder!r}")
    if decoder != "auto":
        return [decoder]
    order = ["pyav"]
    if decord_is_exact(index):
        order.append("decord")
    return order


@functools.cache  # asked once per process: find_spec costs ~0.4 ms, once per video otherwise
def _decord_installed() -> bool:
    return importlib.util.find_spec("decord") is not None


def decord_is_exact(index: VideoIndex) -> bool:
    return index.codec in DECORD_SAFE_CODECS and not index.open_gop and _decord_installed()


def read_frames(
    src: VideoSource, indices: Sequence[int], decoder: str = "auto", threads: int = 1, max_samples: int | None = None
) -> dict[int, np.ndarray]:
    """Decode exactly `indices` (any order, duplicates allowed) -> {index: HxWx3 RGB uint8}.

    decoder: "auto" (see `decoder_order`), "pyav" or "decord" (forced; DecodeError where decord is not exact:
    AV1, HEVC, open GOP). threads: decoder threads per video (1 suits a process pool with one worker per core;
    0 = let FFmpeg choose). Both are arguments, never process-global state.
    Raises DecodeError if the video cannot be opened or an index is outside the video, or when its container
    declares more than `max_samples` samples (`check_declared`).
    """
    threads = int(threads)
    want = sorted(set(int(i) for i in indices))
    if not want:
        return {}
    if want[0] < 0:
        raise DecodeError(f"negative frame index {want[0]}")
    data = _materialize(src)
    check_declared(data, max_samples)
    # one open per video: PyAV decodes from the container the index was read for (its first step is a seek to a
    # keyframe, which resets the demuxer after a demux pass; opening the file again cost ~1.3 ms per video)
    with _open(data) as c:
        index = _seek_index(c, data)
        if want[-1] >= index.num_frames:
            bad = [i for i in want if i >= index.num_frames]
            raise DecodeError(f"frames {bad[:5]} not in video ({index.num_frames} frames)")
        errors = []
        for name in decoder_order(index, decoder):
            try:
                if name == "pyav":
                    return _read_pyav(c, data, index, want, threads)
                return _read_decord(data, index, want, threads)
            except DecodeError as exc:
                errors.append(f"{name}: {exc}")
            except Exception as exc:  # noqa: BLE001 - decord raises its own error types; each is reported
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
    raise DecodeError("; ".join(errors))


# ---------------------------------------------------------------------------------------------------- decord


def _read_decord(data: str | bytes, index: VideoIndex, want: list[int], threads: int) -> dict[int, np.ndarray]:
    decord = _load_decord()
    if decord is None:
        raise DecodeError("decord is not installed")
    if index.codec not in DECORD_SAFE_CODECS or index.open_gop:
        raise DecodeError(f"decord is not frame-exact on {index.codec}{' (open GOP)' if index.open_gop else ''}")
    vr = decord.VideoReader(io.BytesIO(data) if isinstance(data, bytes) else data, num_threads=threads)
    if len(vr) != index.num_frames:
        raise DecodeError(f"decord counts {len(vr)} frames, the demuxer {index.num_frames}")
    batch = vr.get_batch(want).asnumpy()
    if batch.shape[0] != len(want) or batch.ndim != 4 or batch.shape[3] != 3:
        raise DecodeError(f"decord returned shape {batch.shape} for {len(want)} frames")
    return {i: batch[k] for k, i in enumerate(want)}


# ---------------------------------------------------------------------------------------------------- PyAV


def _to_rgb(frame, reformatter: VideoReformatter) -> np.ndarray:
    """`frame.to_ndarray(format="rgb24", threads=1)`, the same pixels, through one reformatter per video: it keeps
    its swscale context, where a frame's own reformatter is new for every frame and sets swscale up again (RH20T
    items step: ~1 s of 7 s of decoding). threads=1: PyAV's default reformatter threading costs ~2 ms per call
    (measured), far more than the conversion."""
    return reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray()


def _read_pyav(c, data: str | bytes, index: VideoIndex, want: list[int], threads: int) -> dict[int, np.ndarray]:
    """Decode `want` from the open container `c` (demuxed by `_index_container`, nothing decoded yet: the codec
    opens on the first decode, so the thread settings still apply); `data` reopens it for the last resort."""
    pts = index.pts
    keys = index.keys
    target_of = {pts[i]: i for i in want}
    out: dict[int, np.ndarray] = {}
    rgb = VideoReformatter()
    s = _video_stream(c)
    cc = s.codec_context
    if threads != 1:
        s.thread_type = "AUTO"
        cc.thread_count = max(0, threads)
    skip_unwanted = threads == 1 and index.codec in SKIP_NONREF_CODECS
    gen = None  # current decode run
    pos: int | None = None  # pts of the last frame this run produced
    try:
        for i in want:
            if i in out:
                continue
            target = pts[i]
            k = bisect.bisect_right(keys, target) - 1  # last keyframe <= target
            if k < 0:
                k = 0
            need_seek = gen is None or pos is None or pos >= target or (keys and keys[k] > pos)
            attempt = k
            while True:
                if need_seek:
                    if attempt < 0 or attempt < k - 3:
                        return _read_sequential(data, index, want, threads, out)
                    c.seek(keys[attempt] if keys else 0, stream=s, backward=True, any_frame=False)
                    gen = _decode_run(c, s, target_of) if skip_unwanted else c.decode(s)
                    pos = None
                for frame in gen:
                    fp = frame.pts
                    if fp is None:
                        return _read_sequential(data, index, want, threads, out)
                    pos = fp
                    j = target_of.get(fp)
                    if j is not None and j not in out:
                        out[j] = _to_rgb(frame, rgb)
                    if fp >= target:
                        break
                if i in out:
                    break
                # overshoot (an open-GOP keyframe's leading pictures were dropped after the seek) or the run
                # ended before the target: restart from the previous keyframe
                gen = None
                need_seek = True
                attempt -= 1
    except av.FFmpegError as exc:
        raise DecodeError(f"decode failed near pts {pos}: {exc}") from exc
    return out


def _decode_run(c, s, target_of: dict[int, int]):
    """`c.decode(s)`, telling the decoder to skip a packet's picture when no frame refers to it and it is not
    wanted (skip_frame NONREF; unwanted B-frames at the end of a GOP are most of what a sparse read decodes). A
    picture no other picture refers to changes nothing else: the wanted frames decode bit-identically (checked on
    every sample video, tests/test_video.py). The flush packet at the end (no pts) decodes normally."""
    cc = s.codec_context
    mode = cc.skip_frame  # a run left before its end (the next wanted frame is past a keyframe) keeps its setting
    for packet in c.demux(s):
        want = "DEFAULT" if packet.pts is None or packet.pts in target_of else "NONREF"
        if want != mode:
            cc.skip_frame = mode = want
        yield from packet.decode()
    if mode != "DEFAULT":
        cc.skip_frame = "DEFAULT"


def _read_sequential(
    data: str | bytes, index: VideoIndex, want: list[int], threads: int, out: dict[int, np.ndarray]
) -> dict[int, np.ndarray]:
    """Last resort: decode from the start without seeking; match by pts, or by position when pts are absent."""
    pts_to_i = {p: i for i, p in enumerate(index.pts)}
    need = set(want) - set(out)
    pos = 0
    rgb = VideoReformatter()
    with _open(data) as c:
        s = _video_stream(c)
        if threads != 1:
            s.thread_type = "AUTO"
        try:
            for frame in c.decode(s):
                i = pts_to_i.get(frame.pts, None) if frame.pts is not None else pos
                if i in need:
                    out[i] = _to_rgb(frame, rgb)
                    need.discard(i)
                    if not need:
                        break
                pos += 1
        except av.FFmpegError as exc:
            raise DecodeError(f"decode failed near frame {pos}: {exc}") from exc
    if need:
        raise DecodeError(f"frames {sorted(need)[:5]} did not decode ({pos} frames decoded)")
    return out
