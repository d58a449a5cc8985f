"""Sample REASSEMBLE corpus in the real TU Wien layout (docs/upstream-formats.md, REASSEMBLE).

    <out>/data/<YYYY-MM-DD-HH-MM-SS>.h5
    <out>/poses/<rec>_poses.json
    <out>/splits/train_split1.txt, test_split1.txt

Each .h5 mirrors a released recording: the cameras `hama1`, `hama2`, `hand`, `capture_node-camera-image` as
scalar opaque (np.void) MP4 blobs (H.264 via PyAV, long GOP with B-frames; small frames instead of 640x480, the
event-camera render at 6 fps), `*_audio` int64 arrays holding MP3 bytes, `events` (N, 3) int64, `robot_state/*`
float64 streams at distinct native rates (the real ~1000 / 970 / 580 / 465 Hz divided by a per-scale factor),
`timestamps/<stream>` float64 Unix seconds (recording id = local CET start time), and the hierarchical
`segments_info/<i>/{start,end,success,text,index,low_level/<j>/...}` annotations with the real vocabulary
("No action." segments carry no low_level group). Files are written with h5py, track_order, libver v110 and
track_times=False, so two runs give identical bytes.

Scales: `tiny` (tests: 7 recordings of ~5-10 s), `demo` (7 recordings of ~20-28 s, 8-11 high-level segments,
6 in test_split1 + 1 in train_split1), `release` (41 recordings of ~250-290 s at 64x48, i.e. ~7,400-8,800 frames
per 30 fps camera, with 31-36 actions each, about as the real ~30.5 actions in ~5.2 min per recording: the 37 of
test_split1, 3 in train_split1 that a `only_split: test_split1` build filters out, and 1 in neither split, as in the
release; recording ids at least 6 min apart).

The robot follows the labels: a "No action." segment is stationary; Approach moves between the tray and the NIST
board (so the wrist-camera marker moves left/right/up/down over a recording); Grasp closes the gripper on the
object; Align/Push/Twist/Nudge/Pull press on the board (force rises); Lift carries; Release opens the gripper and the
force falls. About one action in ten fails (success False on the high-level segment and on its last skill).

Realistic odd cases in the corpora (recording ids as in the release README's known-issues table):
- `2025-01-10-16-17-40`: no `hand` dataset at all;
- `2025-01-10-15-28-50` (and `2025-01-10-17-10-38` in release): hand camera starts late, inside the first action;
- `2025-01-10-17-54-09` (and `2025-01-11-14-22-09` in release): no leading "No action." segment;
- one recording (two in release) in the older per-axis `robot_state` form, with (N, 1) timestamps.
In release the no-`hand` recording sits in train_split1 (ProcessBench's 37 test recordings all have `hand`).
Helpers `write_recording`, `truncate_file` and `corrupt_blob` produce the broken copies the tests use.

Audio: a short valid MP3 of silence (real sample rates/channels) stored as int64 bytes; its length does not match
the recording (nothing in the build reads audio, and encoding full-length MP3s would dominate the release time).
"""

from __future__ import annotations

import calendar
import io
import json
from functools import lru_cache
from pathlib import Path

import av
import h5py
import numpy as np

from .common import INDEX_BITS, encode_video, render_frame, rng_for
from .reassemble_plan import (  # noqa: F401 - the generator's public names stay importable from here
    CAMERAS,
    LOW_VOCAB,
    NO_ACTION,
    OBJECTS,
    OPEN_W,
    PER_AXIS,
    RATES,
    RecSpec,
    SCALES,
    SLUG,
    Seg,
    Track,
    VIENNA_UTC_OFFSET_S,
    plan_recording,
    simulate,
    specs_for,
)

# ---------------------------------------------------------------------------------------------- streams
def _stream_times(rng: np.random.Generator, t_start: float, t_end: float, rate: float) -> np.ndarray:
    n = int((t_end - t_start) * rate)
    base = t_start + np.arange(n) / rate
    return base + rng.uniform(-0.1, 0.1, n) / rate


def robot_streams(tracks: dict[str, Track], rng: np.random.Generator, t_end: float, rate_div: float
                  ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """stream name -> (relative times (N,), values (N, k)) for every robot_state stream."""
    out = {}
    bias_f = np.array([0.25, -0.15, 0.35])
    bias_t = np.array([0.02, 0.01, -0.015])
    lever = np.array([0.0, 0.0, 0.11])
    jmix = rng_for(0, SLUG, "jacobian").normal(0, 1.0, (7, 4))
    j0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.8])
    times = {}
    for name, rate in RATES.items():
        key = {"measured_torque": "measured_force", "joint_velocities": "joint_positions",
               "joint_efforts": "joint_positions", "gripper_velocities": "gripper_positions",
               "gripper_efforts": "gripper_positions", "velocity": "pose", "gripper_positions": "joint_positions",
               "compensated_base_torque": "compensated_base_force"}.get(name, name)
        if key not in times:
            times[key] = _stream_times(rng, 0.0, t_end, rate / rate_div)
        times[name] = times[key]
    for name in RATES:
        t = times[name]
        n = t.size
        p, dp = tracks["pos"].eval(t)
        y, dy = tracks["yaw"].eval(t)
        w, dw = tracks["width"].eval(t)
        e, _ = tracks["effort"].eval(t)
        c, _ = tracks["contact"].eval(t)
        if name == "pose":
            q = np.stack([np.zeros(n), np.cos(y[:, 0] / 2), np.sin(y[:, 0] / 2), np.zeros(n)], 1)
            v = np.concatenate([p + rng.normal(0, 5e-5, (n, 3)), q + rng.normal(0, 1e-5, (n, 4))], 1)
        elif name == "velocity":
            v = np.concatenate([dp, np.zeros((n, 2)), dy], 1) + rng.normal(0, 3e-4, (n, 6))
        elif name == "measured_force":
            v = bias_f + c + rng.normal(0, 0.12, (n, 3))
        elif name == "measured_torque":
            v = bias_t + np.cross(lever, c) + rng.normal(0, 0.01, (n, 3))
        elif name == "compensated_base_force":
            v = c * np.array([1.0, 1.0, -1.0]) + np.array([0.1, 0.05, -0.2]) + rng.normal(0, 0.2, (n, 3))
        elif name == "compensated_base_torque":
            v = np.cross(lever, c) + rng.normal(0, 0.02, (n, 3))
        elif name.startswith("joint_"):
            x = np.concatenate([p - np.array([0.45, 0.0, 0.3]), y], 1)
            dx = np.concatenate([dp, dy], 1)
            if name == "joint_positions":
                v = j0 + 0.8 * x @ jmix.T + rng.normal(0, 2e-5, (n, 7))
            elif name == "joint_velocities":
                v = 0.8 * dx @ jmix.T + rng.normal(0, 2e-4, (n, 7))
            else:
                v = np.array([0.0, -20.0, 0.5, 18.0, 0.6, 2.0, 0.1]) + 0.3 * (c @ jmix[:, :3].T) \
                    + rng.normal(0, 0.05, (n, 7))
        elif name == "gripper_positions":
            v = np.repeat(w / 2, 2, 1) + rng.normal(0, 1e-5, (n, 2))
        elif name == "gripper_velocities":
            v = np.repeat(dw / 2, 2, 1) + rng.normal(0, 1e-4, (n, 2))
        else:  # gripper_efforts
            v = np.repeat(e / 2, 2, 1) + rng.normal(0, 0.05, (n, 2))
        out[name] = (t, np.ascontiguousarray(v, dtype=np.float64))
    return out


@lru_cache(maxsize=4)
def _mp3_silence(rate: int, channels: int, seconds: float = 2.0) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp3") as out:
        s = out.add_stream("libmp3lame", rate=rate)
        s.layout = "stereo" if channels == 2 else "mono"
        s.bit_rate = 32000
        n = int(seconds * rate)
        fr = av.AudioFrame.from_ndarray(np.zeros((channels, n), np.float32), format="fltp", layout=s.layout.name)
        fr.sample_rate = rate
        fr.pts = 0
        for pkt in s.encode(fr):
            out.mux(pkt)
        for pkt in s.encode():
            out.mux(pkt)
    return buf.getvalue()


def _marker(cam: str, p: np.ndarray) -> tuple[float, float]:
    x, y, z = p
    if cam == "hand":  # wrist camera looking down: board y -> image x, board x -> image y
        return 0.5 + y / 0.7, 0.5 + (x - 0.48) / 0.45
    if cam == "hama1":
        return 0.5 + y / 0.7, 1.0 - z / 0.40
    if cam == "hama2":
        return 0.5 + (x - 0.48) / 0.45, 1.0 - z / 0.40
    return 0.5 - y / 0.7, 0.5 - (x - 0.48) / 0.45


HUES = {"hand": 0, "hama1": 40, "hama2": 80, "capture_node-camera-image": 120}


def _camera(tracks, rng, cam: str, t_start: float, t_end: float, fps: float, size,
            name: str = "") -> tuple[np.ndarray, bytes]:
    n = int((t_end - t_start) * fps)
    t = t_start + np.arange(n) / fps + np.clip(rng.normal(0, 0.0015, n), -0.004, 0.004)
    p, _ = tracks["pos"].eval(t)
    w, _ = tracks["width"].eval(t)
    frames = (render_frame(i, size[0], size[1], _marker(cam, p[i]), float(w[i, 0] / OPEN_W), HUES[cam])
              for i in range(n))
    gop = 60 if fps >= 15 else 12
    return t, encode_video(frames, fps, codec="h264", gop=gop, name=name or None)


# ---------------------------------------------------------------------------------------------- writing
def _ds(group: h5py.Group, name: str, data) -> None:
    group.create_dataset(name, data=data, track_times=False)


def _unix_t0(rec_id: str) -> float:
    y, mo, d, h, mi, s = (int(x) for x in rec_id.split("-"))
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - VIENNA_UTC_OFFSET_S)


def write_recording(path: Path, spec: RecSpec, scale: str = "demo", seed: int = 0) -> list[Seg]:
    """Write one recording .h5 (deterministic from (seed, recording id)); returns its planned segments."""
    cfg = SCALES[scale]
    rng = rng_for(seed, SLUG, spec.rec_id)
    segs = plan_recording(rng, scale, spec.leading_no_action, spec.force_failure)
    tracks = simulate(segs, rng)
    t_end = segs[-1].end + 0.25
    streams = robot_streams(tracks, rng, t_end + 0.2, cfg["rate_div"])
    t0 = _unix_t0(spec.rec_id)

    cams: dict[str, tuple[np.ndarray, bytes]] = {}
    for cam in CAMERAS:
        if cam == "hand" and not spec.hand:
            continue
        start = 0.15 + float(rng.uniform(0.0, 0.05))
        if cam == "hand" and spec.hand_late:
            first_action = next(i for i, s in enumerate(segs) if s.text != NO_ACTION)
            s = segs[first_action]
            start = s.low[0].end + 0.5 * (s.low[1].end - s.low[1].start) if len(s.low) > 1 else \
                0.5 * (s.start + s.end)
        if cam == "capture_node-camera-image":
            fps, size = 6.0, cfg["event"]
        else:
            fps, size = 30.0, cfg["hand"] if cam == "hand" else cfg["hama"]
        cams[cam] = _camera(tracks, rng, cam, start, t_end, fps, size, name=f"{spec.rec_id}.h5 {cam}")
        if cams[cam][0].size > 1 << INDEX_BITS:
            raise ValueError(f"{spec.rec_id}/{cam}: {cams[cam][0].size} frames exceed the frame barcode's range")

    n_ev = int(t_end * cfg["events_per_s"])
    ev_t = np.sort(rng.uniform(0.0, t_end, n_ev))
    events = np.stack([rng.integers(0, 346, n_ev), rng.integers(0, 260, n_ev), rng.integers(0, 2, n_ev)],
                      1).astype(np.int64)

    def tsdata(t: np.ndarray) -> np.ndarray:
        a = (t0 + t).astype(np.float64)
        return a[:, None] if spec.ts_2d else a

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with h5py.File(tmp, "w", libver=("v110", "v110"), track_order=True) as f:
        for cam in CAMERAS:
            if cam in cams:
                _ds(f, cam, np.void(cams[cam][1]))
        for mic, (rate, ch) in (("hama1_audio", (16000, 2)), ("hama2_audio", (16000, 2)), ("hand_audio", (48000, 1))):
            _ds(f, mic, np.frombuffer(_mp3_silence(rate, ch), np.uint8).astype(np.int64))
        _ds(f, "events", events)
        rs = f.create_group("robot_state", track_order=True)
        ts = f.create_group("timestamps", track_order=True)
        for cam in CAMERAS:
            if cam in cams:
                _ds(ts, cam, tsdata(cams[cam][0]))
        _ds(ts, "events", tsdata(ev_t))
        for name, (t, v) in streams.items():
            if spec.per_axis:
                keys = PER_AXIS.get(name)
                if keys is None:  # joints/gripper: pos_joint1..9, vel_joint1..9, eff_joint1..9
                    if name.startswith("gripper_"):
                        continue
                    prefix = {"joint_positions": "pos", "joint_velocities": "vel", "joint_efforts": "eff"}[name]
                    grip = streams[name.replace("joint_", "gripper_")][1]
                    v = np.concatenate([v, grip], 1)
                    keys = [f"{prefix}_joint{i}" for i in range(1, 10)]
                for i, k in enumerate(keys):
                    _ds(rs, k, np.ascontiguousarray(v[:, i]))
                    _ds(ts, k, tsdata(t))
            else:
                _ds(rs, name, v)
                _ds(ts, name, tsdata(t))
        si = f.create_group("segments_info", track_order=True)
        for i, s in enumerate(segs):
            g = si.create_group(str(i), track_order=True)
            _write_seg(g, s, t0)
            _ds(g, "index", np.int64(i))
            if s.low:
                ll = g.create_group("low_level", track_order=True)
                for j, low in enumerate(s.low):
                    _write_seg(ll.create_group(str(j), track_order=True), low, t0)
    tmp.replace(path)
    return segs


def _write_seg(g: h5py.Group, s: Seg, t0: float) -> None:
    _ds(g, "start", np.float64(t0 + s.start))
    _ds(g, "end", np.float64(t0 + s.end))
    _ds(g, "success", np.bool_(s.success))
    _ds(g, "text", np.bytes_(s.text.encode("utf-8")))


def _poses(rng: np.random.Generator) -> dict:
    def pose(xyz, q):
        q = np.asarray(q, float) + rng.normal(0, 0.01, 4)
        q /= np.linalg.norm(q)
        return [[round(float(v), 6) for v in np.asarray(xyz) + rng.normal(0, 0.005, 3)],
                [round(float(v), 6) for v in q]]  # [x, y, z], [qx, qy, qz, qw]
    return {
        "Hama1": pose([1.10, 0.45, 0.65], [0.62, 0.55, -0.35, -0.43]),
        "Hama2": pose([1.05, -0.50, 0.60], [0.60, -0.58, 0.36, -0.41]),
        "DAVIS346": pose([0.95, 0.05, 0.70], [0.70, 0.0, 0.0, -0.71]),
        "NIST_Board1": pose([0.55, 0.0, 0.09], [0.0, 0.0, 0.0, 1.0]),
    }


def release_units(seed: int = 0, units_factor: int | float = 1) -> int:
    """test_split1 recordings the release scale writes with units factor K (a ValueError when K leaves too few)."""
    return sum("test_split1" in s.splits for s in specs_for("release", seed, units_factor))


def write(
    out_dir: Path, scale: str = "demo", seed: int = 0, layout: str = "release", units_factor: int | float = 1
) -> None:
    """Write the REASSEMBLE sample corpus (`tiny`, `demo` or `release`) into `out_dir` (the source root).
    layout "release": data/<rec>.h5 + poses/ + splits/ as TU Wien ships it; "flat": only the <rec>.h5 files, side by
    side in `out_dir` (as the authors' converter and other readers keep them)."""
    out_dir = Path(out_dir)
    if layout not in ("release", "flat"):
        raise ValueError(f"layout must be 'release' or 'flat', not {layout!r}")
    if layout == "flat":
        for spec in specs_for(scale, seed, units_factor):
            write_recording(out_dir / f"{spec.rec_id}.h5", spec, scale, seed)
        return
    specs = specs_for(scale, seed, units_factor)
    ids = {s.rec_id for s in specs}
    for sub, suffix in (("data", ".h5"), ("poses", "_poses.json")):
        d = out_dir / sub
        if d.is_dir():  # drop stale recordings of an earlier corpus written here
            for p in d.iterdir():
                if p.name.endswith(suffix) and p.name[: -len(suffix)] not in ids:
                    p.unlink()
    for spec in specs:
        write_recording(out_dir / "data" / f"{spec.rec_id}.h5", spec, scale, seed)
        pose_path = out_dir / "poses" / f"{spec.rec_id}_poses.json"
        pose_path.parent.mkdir(parents=True, exist_ok=True)
        pose_path.write_text(json.dumps(_poses(rng_for(seed, SLUG, spec.rec_id, "poses")), indent=4) + "\n")
    sdir = out_dir / "splits"
    sdir.mkdir(parents=True, exist_ok=True)
    for split in ("train_split1", "test_split1"):
        lines = [s.rec_id for s in specs if split in s.splits]
        (sdir / f"{split}.txt").write_text("".join(f"{r}\n" for r in lines))


# ---------------------------------------------------------------------------------------------- broken copies
def truncate_file(path: Path, keep: float = 0.4) -> None:
    """Cut an .h5 file short (a partial download / corrupt extraction)."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * keep)])


def corrupt_blob(path: Path, camera: str = "hand", mode: str = "garbage") -> None:
    """Replace a camera's MP4 blob: `garbage` = bytes that are not an MP4 at all; `truncated` = the first 60 % of
    the real MP4 (the moov atom at the end is lost)."""
    with h5py.File(path, "r+") as f:
        blob = bytes(f[camera][()])
        if mode == "garbage":
            new = bytes(rng_for(0, "garbage").integers(0, 256, len(blob), dtype=np.uint8))
        else:
            new = blob[: int(len(blob) * 0.6)]
        del f[camera]
        f.create_dataset(camera, data=np.void(new), track_times=False)


__all__ = ["write", "write_recording", "specs_for", "RecSpec", "plan_recording", "truncate_file", "corrupt_blob",
           "OBJECTS", "LOW_VOCAB", "NO_ACTION", "SCALES"]
