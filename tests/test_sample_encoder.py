"""upstream_adapters/samples/common.py encode_video: sample generation cannot hang (issue 14, item 11: an intermittent
AV1 error followed by a 22-minute hang in the encoder's teardown). A hung encoder is killed after the configured time,
the video is encoded again, and when every attempt fails the error names the file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from upstream_adapters.media import video
from upstream_adapters.samples import common
from upstream_adapters.samples.common import EncodeError, decode_frame_index, encode_video, encoder_limits, render_frame

REAL_ENCODE = common._encode


def _frames(n=12):
    return (render_frame(i, 64, 48) for i in range(n))  # a generator: every attempt must start from frame 0


def _hang_first_time(marker: Path):
    def encode(frames, fps, codec, gop, bframes):
        if not marker.exists():  # first attempt: fail, then hang in "teardown" (what SVT-AV1 did)
            marker.write_text("")
            try:
                raise RuntimeError("svt-av1: intermittent encoder error")
            finally:
                time.sleep(3600)
        return REAL_ENCODE(frames, fps, codec, gop, bframes)

    return encode


def test_a_hung_encoder_is_killed_and_the_video_encoded_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(common, "_encode", _hang_first_time(tmp_path / "hung-once"))
    out = tmp_path / "videos" / "episode_000001.mp4"
    t = time.time()
    with encoder_limits(timeout_s=2, attempts=2):
        data = encode_video(_frames(), 10, path=out)
    assert time.time() - t < 30
    assert out.read_bytes() == data
    frames = video.read_frames(out, list(range(12)))
    assert [decode_frame_index(frames[i]) for i in range(12)] == list(range(12))
    assert "episode_000001.mp4" in caplog.text and "hung" in caplog.text
    # the result is the bytes an undisturbed encode gives
    monkeypatch.setattr(common, "_encode", REAL_ENCODE)
    assert encode_video(_frames(), 10) == data


def test_an_encoder_that_always_hangs_fails_naming_the_file(tmp_path, monkeypatch):
    def hang(*args):
        time.sleep(3600)

    monkeypatch.setattr(common, "_encode", hang)
    t = time.time()
    with encoder_limits(timeout_s=1, attempts=2), pytest.raises(EncodeError) as err:
        encode_video(_frames(), 10, codec="av1", path=tmp_path / "task_00002" / "episode_000003.mp4")
    assert time.time() - t < 20
    msg = str(err.value)
    assert "episode_000003.mp4" in msg and "av1" in msg and "attempt 2" in msg and "hung" in msg
    assert not (tmp_path / "task_00002").exists()  # nothing half-written


def test_an_encoder_error_is_retried_then_reported(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("svt-av1: bad parameters")

    monkeypatch.setattr(common, "_encode", broken)
    with encoder_limits(timeout_s=30, attempts=3), pytest.raises(EncodeError) as err:
        encode_video(_frames(), 10, name="rh20t scene_0001 cam_036422060215")
    assert "cam_036422060215" in str(err.value) and str(err.value).count("bad parameters") == 3
