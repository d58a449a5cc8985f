"""Shared pieces of the sample-data generators: deterministic RNGs, rendered frames and video encoding.

Every rendered frame carries its own frame index as a 14-bit barcode along the top edge (white/black cells on a
grey band; a cell is width // 14 px, so frames must be at least 42 px wide; the sample sizes, 64x36 and up, give
4 px cells), so a test can decode frame i and check it reads back as i, whatever codec wrote it. Below the band, a
gripper-like marker moves along the recorded trajectory over a background that drifts with time, so temporal
questions have visible answers.

Video encoding runs in a forked child process with a time limit (`encoder_limits`, from configs/build.yaml
`build.samples.encoder_timeout_s` / `encoder_attempts`): an encoder that hangs (seen once: an intermittent SVT-AV1
error followed by a 22-minute hang in the encoder's teardown) is killed, the video is encoded again, and after the
last attempt `EncodeError` names the file, the codec and what happened. The child inherits the frames (a generator is
consumed in the child only, so every attempt starts from the first frame) and dies with its parent.
"""

from __future__ import annotations

import hashlib
import io
import logging
import multiprocessing as mp
import os
import tempfile
import traceback
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Iterator

import av
import numpy as np

INDEX_BITS = 14  # frames 0..16383 (REASSEMBLE release recordings reach ~9,000 hand-camera frames)
log = logging.getLogger(__name__)

# defaults of configs/build.yaml build.samples (write_samples sets them for one generator run)
ENCODER_LIMITS = {"timeout_s": 300.0, "attempts": 2}


class EncodeError(RuntimeError):
    """A sample video that could not be encoded within the limits (the message names the file)."""


@contextmanager
def encoder_limits(timeout_s: float | None = None, attempts: int | None = None) -> Iterator[None]:
    """Set the encoder's time limit per attempt and its number of attempts for the duration of the block."""
    saved = dict(ENCODER_LIMITS)
    if timeout_s is not None:
        ENCODER_LIMITS["timeout_s"] = float(timeout_s)
    if attempts is not None:
        ENCODER_LIMITS["attempts"] = max(1, int(attempts))
    try:
        yield
    finally:
        ENCODER_LIMITS.update(saved)


def units_factor(value: object) -> int | float:
    """The release scale's units factor K from the command line or a caller: an integer >= 1 or a fraction in (0, 1];
    a ValueError otherwise."""
    try:
        k = float(value)
    except (TypeError, ValueError):
        k = float("nan")
    if k >= 1 and k.is_integer():
        return int(k)
    if 0 < k < 1:
        return k
    raise ValueError(f"units factor takes an integer >= 1 or a fraction in (0, 1], got {value!r}")


def scaled(n: int, factor: int | float, source: str, what: str) -> int:
    """n units of the release scale times the units factor K (a fraction rounds half up); a ValueError naming the
    source when K would leave it none."""
    k = units_factor(factor)
    out = n * k if isinstance(k, int) else int(n * Fraction(str(k)) + Fraction(1, 2))
    if out < 1:
        raise ValueError(f"units factor {k:g} leaves {source} no {what} (the release scale has {n})")
    return out


def rng_for(seed: int, *key: object) -> np.random.Generator:
    """An RNG seeded from (seed, key...) so every unit's sample data is independent of generation order."""
    digest = hashlib.sha256(repr((seed,) + key).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def render_frame(index: int, width: int, height: int, marker_xy: tuple[float, float] = (0.5, 0.5),
                 gripper_open: float = 1.0, hue: int = 0) -> np.ndarray:
    """RGB uint8 frame: index barcode on top, a marker at `marker_xy` (0..1 image coords), drifting background."""
    img = np.empty((height, width, 3), np.uint8)
    t = index % 256
    img[..., 0] = (40 + hue + t // 2) % 256
    img[..., 1] = (60 + (index * 3) % 120)
    img[..., 2] = (90 + hue * 2) % 256
    band = max(4, height // 8)
    img[:band] = 128
    cell = width // INDEX_BITS
    for b in range(INDEX_BITS):
        if (index >> b) & 1:
            img[1:band - 1, b * cell + 1:(b + 1) * cell - 1] = 255
        else:
            img[1:band - 1, b * cell + 1:(b + 1) * cell - 1] = 0
    r = max(2, min(width, height) // 10)
    cx = int(np.clip(marker_xy[0], 0, 1) * (width - 2 * r)) + r
    cy = int(np.clip(marker_xy[1], 0, 1) * (height - band - 2 * r)) + band + r
    img[cy - r:cy + r, cx - r:cx + r] = (250, 220, 40)
    jaw = int(r * np.clip(gripper_open, 0, 1))
    img[cy - r:cy + r, max(0, cx - r - jaw):max(0, cx - r - jaw) + 2] = (20, 20, 20)
    img[cy - r:cy + r, min(width - 2, cx + r + jaw):min(width - 2, cx + r + jaw) + 2] = (20, 20, 20)
    return img


def decode_frame_index(img: np.ndarray) -> int:
    """Read back the barcode written by `render_frame` (robust to lossy compression)."""
    height, width = img.shape[:2]
    band = max(4, height // 8)
    cell = width // INDEX_BITS
    value = 0
    for b in range(INDEX_BITS):
        patch = img[1:band - 1, b * cell + 1:(b + 1) * cell - 1]
        if patch.mean() > 128:
            value |= 1 << b
    return value


def encode_video(frames: Iterable[np.ndarray], fps: float, codec: str = "h264", gop: int = 30,
                 bframes: bool = True, path: Path | None = None, name: str | None = None) -> bytes:
    """Encode RGB frames as an MP4 with PyAV; return the bytes (and write `path` if given).

    codec: h264 (libx264, long GOP, B-frames as cameras and LeRobot write them), hevc (libx265, open GOP),
    av1 (libsvtav1, the LeRobot default) or mpeg4 (mp4v, what pip OpenCV writes).
    Runs under ENCODER_LIMITS (see the module doc); `name` (default: `path`) is what an EncodeError names.
    """
    what = name or (str(path) if path is not None else f"an in-memory {codec} video")
    timeout, attempts = float(ENCODER_LIMITS["timeout_s"]), int(ENCODER_LIMITS["attempts"])
    problems = []
    for attempt in range(1, attempts + 1):
        data, problem = _encode_in_child(frames, fps, codec, gop, bframes, timeout)
        if data is not None:
            break
        problems.append(f"attempt {attempt}: {problem}")
        log.warning("sample video %s: %s encoder attempt %d of %d failed: %s", what, codec, attempt, attempts,
                    problem)
    else:
        raise EncodeError(f"cannot encode sample video {what} ({codec}): " + "; ".join(problems))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return data


def _encode_in_child(frames, fps, codec, gop, bframes, timeout: float) -> tuple[bytes | None, str | None]:
    """(bytes, None) from a forked child running `_encode`, or (None, what went wrong)."""
    from upstream_adapters.lifetime import die_with

    with tempfile.TemporaryDirectory(prefix="pbencode-") as tmp:
        out, err = Path(tmp, "video.mp4"), Path(tmp, "error.txt")
        parent = os.getpid()

        def child() -> None:
            die_with(parent)
            try:
                out.write_bytes(_encode(frames, fps, codec, gop, bframes))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent through the error file
                err.write_text(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
                os._exit(1)
            os._exit(0)

        proc = mp.get_context("fork").Process(target=child, daemon=True)
        proc.start()
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            return None, f"no result after {timeout:g} s (encoder hung; killed)"
        if proc.exitcode != 0 or not out.exists():
            why = err.read_text().splitlines()[0] if err.exists() else f"encoder process exited with {proc.exitcode}"
            return None, why
        return out.read_bytes(), None


def _encode(frames: Iterable[np.ndarray], fps: float, codec: str, gop: int, bframes: bool) -> bytes:
    buf = io.BytesIO()
    names = {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1", "mpeg4": "mpeg4"}
    with av.open(buf, "w", format="mp4") as out:
        rate = Fraction(fps).limit_denominator(1001)
        stream = out.add_stream(names[codec], rate=rate)
        stream.pix_fmt = "yuv420p"
        stream.gop_size = gop
        opts: dict[str, str] = {}
        if codec == "h264":
            # mbtree=0: libx264's macroblock-tree rate control made identical input give different bytes here
            opts = {"preset": "veryfast", "crf": "20", "bf": "2" if bframes else "0", "threads": "1",
                    "x264-params": "mbtree=0"}
            stream.codec_context.options = opts
        elif codec == "hevc":
            stream.codec_context.options = {"preset": "ultrafast", "x265-params": f"keyint={gop}:log-level=none"}
        elif codec == "av1":
            stream.codec_context.options = {"preset": "11", "crf": "35", "svtav1-params": "log-level=0"}
        first = True
        for rgb in frames:
            if first:
                stream.height, stream.width = rgb.shape[:2]
                first = False
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            for pkt in stream.encode(vf):
                out.mux(pkt)
        for pkt in stream.encode():
            out.mux(pkt)
    return buf.getvalue()
