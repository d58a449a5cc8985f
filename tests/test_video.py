"""upstream_adapters/media/video.py: frame i decodes as i on every codec, from a path and from bytes, whatever the
selection pattern, including the open-GOP HEVC frames decord gets wrong and AV1 that decord cannot open."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest

from upstream_adapters.media import video
from upstream_adapters.samples.common import decode_frame_index, encode_video, render_frame

N = 90
GOP = 30
CODECS = ["h264", "hevc", "av1", "mpeg4"]
HAS_DECORD = importlib.util.find_spec("decord") is not None


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, tuple]:
    """One small clip per codec (160x128, 90 frames, GOP 30): H.264 with B-frames, x265 open GOP, SVT-AV1, mp4v."""
    root = tmp_path_factory.mktemp("videos")
    frames = [render_frame(i, 160, 128, (i / N, 0.5)) for i in range(N)]
    out = {}
    for codec in CODECS:
        path = root / f"{codec}.mp4"
        data = encode_video(frames, 30, codec=codec, gop=GOP, bframes=True, path=path)
        out[codec] = (path, data)
    return out


def _check(got: dict, want) -> None:
    assert sorted(got) == sorted(set(want))
    for i, img in got.items():
        assert img.dtype == np.uint8 and img.shape == (128, 160, 3)
        assert decode_frame_index(img) == i, f"frame {i} decoded as {decode_frame_index(img)}"


@pytest.mark.parametrize("codec", CODECS)
def test_every_frame_exact_from_path_and_bytes(videos, codec):
    path, data = videos[codec]
    assert video.count_frames(path) == N and video.count_frames(data) == N
    _check(video.read_frames(path, range(N)), range(N))
    _check(video.read_frames(data, range(N)), range(N))


@pytest.mark.parametrize("codec", CODECS)
def test_sparse_unsorted_duplicate_selections(videos, codec):
    path, data = videos[codec]
    rng = random.Random(codec)
    patterns = [
        [N - 1],
        [0],
        [GOP - 1, GOP, GOP + 1],  # around a keyframe (open-GOP leading pictures)
        list(range(1, N, 2)),  # the pattern decord gets wrong on HEVC
        rng.sample(range(N), 7),
        [60, 5, 60, 33, 5],  # unsorted, duplicates
    ]
    for k, want in enumerate(patterns):
        _check(video.read_frames(path if k % 2 else data, want), want)


def test_open_gop_detected_and_decoder_order(videos):
    idx = {c: video.probe(videos[c][0]) for c in CODECS}
    assert idx["hevc"].open_gop and not idx["h264"].open_gop
    assert video.decoder_order(idx["hevc"]) == ["pyav"]
    assert video.decoder_order(idx["av1"]) == ["pyav"]
    if HAS_DECORD:
        assert video.decoder_order(idx["h264"]) == ["pyav", "decord"]
    assert video.decoder_order(idx["hevc"], "decord") == ["decord"]


@pytest.mark.skipif(not HAS_DECORD, reason="decord not installed")
def test_hevc_frames_decord_gets_wrong_are_exact_here(videos):
    import cv2  # noqa: F401 - before decord (see video._load_decord)
    import decord

    path, data = videos["hevc"]
    want = list(range(1, N, 2))
    batch = decord.VideoReader(str(path)).get_batch(want).asnumpy()
    decord_wrong = [i for i, img in zip(want, batch) if decode_frame_index(img) != i]
    assert decord_wrong, "expected decord 0.6 to misplace frames after the open-GOP keyframe"
    for src in (path, data):
        got = video.read_frames(src, decord_wrong)
        _check(got, decord_wrong)
    with pytest.raises(video.DecodeError):  # forcing decord where it is not exact is refused
        video.read_frames(path, [1], decoder="decord")
    with pytest.raises(video.DecodeError):  # decord cannot open AV1
        video.read_frames(videos["av1"][0], [1], decoder="decord")


@pytest.mark.skipif(not HAS_DECORD, reason="decord not installed")
@pytest.mark.parametrize("codec", ["h264", "mpeg4"])
def test_decord_and_pyav_pixels_identical(videos, codec):
    path, _ = videos[codec]
    want = [0, 7, 31, 58, 89]
    a = video.read_frames(path, want, decoder="decord")
    b = video.read_frames(path, want, decoder="pyav")
    _check(a, want)
    for i in want:
        assert np.array_equal(a[i], b[i])


def test_threads_and_decoder_are_arguments(videos):
    path, _ = videos["h264"]
    _check(video.read_frames(path, [3, 44, 88], decoder="pyav", threads=0), [3, 44, 88])
    assert not hasattr(video, "configure")  # no process-global decoder state
    with pytest.raises(ValueError):
        video.read_frames(path, [3], decoder="nope")


def test_errors(videos, tmp_path):
    path, _ = videos["h264"]
    assert video.read_frames(path, []) == {}
    with pytest.raises(video.DecodeError, match="not in video"):
        video.read_frames(path, [5, N])
    with pytest.raises(video.DecodeError, match="negative"):
        video.read_frames(path, [-1])
    with pytest.raises(video.DecodeError):
        video.read_frames(b"not a video at all" * 10, [0])
    with pytest.raises(video.DecodeError):
        video.count_frames(tmp_path / "missing.mp4")


def test_decoder_id_names_versions():
    ident = video.decoder_id("auto")
    assert video.DECODER_VERSION in ident and "av=" in ident and "|auto|" in ident
    assert video.decoder_id("pyav") != ident


@pytest.mark.parametrize("codec", CODECS)
def test_skipping_unwanted_non_reference_pictures_changes_no_wanted_pixel(videos, codec, monkeypatch):
    """skip_frame NONREF on the packets of unwanted frames: every wanted frame bit-identical to a full decode, with
    the same seeks and no extra retry, on sparse, dense and open-GOP retry patterns and on a run that follows one
    left in the skipping state; H.264 (B-frames) decodes fewer pictures; AV1 (libdav1d reads the setting once, at
    open) never skips."""
    path, data = videos[codec]
    rng = random.Random(codec)
    patterns = [
        [N - 1],
        [0],
        [GOP - 1, GOP, GOP + 1],
        [GOP + 1, 2 * GOP - 1],
        list(range(1, N, 2)),
        sorted(rng.sample(range(N), 7)),
        [5, 33, 60],
        [5, GOP, GOP + 1, GOP + 2, GOP + 3],
        list(range(N)),
    ]
    real = video._decode_run
    sequential = video._read_sequential

    def read_all(run):
        runs, decoded, last_resort = [], [], []

        def counted(c, s, target_of):
            runs.append(1)
            for frame in run(c, s, target_of):
                decoded.append(frame.pts)
                yield frame

        monkeypatch.setattr(video, "_decode_run", counted)
        monkeypatch.setattr(video, "_read_sequential", lambda *a: last_resort.append(1) or sequential(*a))
        got = [video.read_frames(data if k % 2 else path, p) for k, p in enumerate(patterns)]
        return got, len(runs), len(decoded), len(last_resort)

    got, runs, decoded, last_resort = read_all(real)
    ref, ref_runs, ref_decoded, ref_last_resort = read_all(lambda c, s, target_of: c.decode(s))  # nothing skipped
    for p, g, r in zip(patterns, got, ref):
        _check(g, p)
        assert all(np.array_equal(g[i], r[i]) for i in r), p
    assert (runs, last_resort) == (ref_runs, ref_last_resort)  # a skipped wanted picture would cost a retry
    assert bool(runs) == (codec != "av1")
    if codec == "h264":
        assert decoded < ref_decoded
