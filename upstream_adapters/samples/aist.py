"""Sample AIST-Bimanual corpus in the real distribution layout (docs/upstream-formats.md, AIST-Bimanual).

    <out_dir>/aist_bimanual_manifest.csv        task_id,task_name,taxonomy,url (all 10 ProcessBench tasks)
    <out_dir>/<task_name>.zip                   members: "<task_name>/" then <task_name>/episode_<N>.hdf5

Each episode HDF5 (ALOHA style, written with track_times=False so the bytes are reproducible):
    attrs "Task name", "taxonomy", "frame_rate" (int 50)
    observations/qpos, observations/qvel   (T, 14) float32, ALOHA order (left 0-5 joints, 6 gripper; right 7-12, 13)
    observations/images/cam_high, cam_low  (T, L) uint8 JPEG bytes zero-padded to the episode's longest frame
    observations/depth/cam_high            (T, 12, 16) uint16 (small stand-in; the real format is unverified)
    observations/sound                     empty group
    text/prompt                            bytes scalar

Motion: the episode is a sequence of blocks: a leading idle, then cycles of {left only, right only, both} moving
blocks in a seeded order, each followed by a both-idle block. A moving block is one continuous bout of two stretches
for each moving arm (~1.0-1.4 s each, nominal): approach (gripper open, one joint-space direction) then carry (gripper
closes at the start, another direction), with the speed ramping up at the bout's start and down at its end only; the
gripper re-opens (release) early in the following idle block (~2.8-3.6 s). Release episodes (17-20 s) hold 3-4
moving blocks, so every coordination state has bouts of ~100-140 frames, well over T4's 45-frame window. Directions
per arm come from a shuffled cycle of (+x, -x, +y, -y) on the (qpos[0], qpos[1]) / (qpos[7], qpos[8]) joint proxies,
so each arm moves in all four directions in every episode. Speeds 0.3-0.6 rad/s on the driving joint, capped so a
stretch moves at most 0.42 rad (T3 deltas >> 0.035 rad over 45 frames); idle joint-space speed ~0.015 (below
ProcessBench's 0.08 floor); each arm is active for ~27 % of the episode (under the 0.70-quantile activity threshold's
30 %, so the threshold falls in idle noise or on the speed ramps, never inside a bout).

Images: `render_frame` draws the frame-index barcode and the LEFT arm's marker (yellow); a second, cyan marker for the
RIGHT arm is drawn on top. Marker positions follow the joint proxies through the mapping below, which is consistent
with ProcessBench's human calibration for cam_high (aist_t3_direction_mapping_cam_high.json), completed for the one
bucket it filtered (left arm, qpos-y increasing -> image left):

    qpos-delta direction (auto label)  ->  image direction on cam_high
    left arm:   x+ (right) -> up,   x- (left) -> down,   y+ (top) -> left,   y- (bottom) -> right
    right arm:  x+ (right) -> down, x- (left) -> up,     y+ (top) -> left,   y- (bottom) -> right

cam_low shows the same markers mirrored vertically (a view from below/front) with another background hue.

Odd cases for tests: `episode_bytes(...)` writes one episode with flags (no frame_rate attr, a camera dropped, extra
qpos rows), `write_task_zip(...)` writes a zip from {member: bytes}; the default demo corpus also holds one realistic
odd case: task_066 episode_2 has no "frame_rate" attr (readers fall back to 50 fps).
"""

from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path

import cv2
import h5py
import numpy as np

from .common import render_frame, rng_for, scaled

MANIFEST = "aist_bimanual_manifest.csv"
FPS = 50
JPEG_QUALITY = 90
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
CAMERAS = ("cam_high", "cam_low")

# ProcessBench's 10 AIST tasks (docs/upstream-formats.md, AIST-Bimanual): task_id, task_name, taxonomy, prompt
TASKS = [
    ("task_004", "insert_usb_cable", "Asynchronous Bimanual", "Insert the USB cable using both arms."),
    ("task_016", "insert_rod_board", "Asynchronous Bimanual", "Insert the rod into the board."),
    ("task_031", "handover_clear_zip_bag_upright", "Asynchronous Bimanual",
     "Hand over the clear zip bag and stand it upright."),
    ("task_044", "insert_lan_cable_into_the_hub", "Asynchronous Bimanual", "Insert the LAN cable into the hub."),
    ("task_048", "handover_blue_block", "Asynchronous Bimanual", "Hand over the blue block."),
    ("task_066", "brush_screws_into_dustpan_human_brush_left_hold", "collaboration",
     "Hold the dustpan with the left arm while the human brushes the screws in."),
    ("task_067", "brush_screws_into_dustpan_left_brush_human_hold", "collaboration",
     "Brush the screws into the dustpan the human holds, using the left arm."),
    ("task_070", "hit_mark_with_hammer", "Asynchronous Bimanual", "Hit the mark with the hammer."),
    ("task_084", "open_toolbox", "Synchronous Bimanual", "Open the toolbox using both arms."),
    ("task_089", "close_cardboard_box", "Asynchronous Bimanual", "Close the cardboard box."),
]

SCALES = {
    # tasks, episodes per task, frame-count range, (width, height)
    "demo": (["task_004", "task_066", "task_084"], 3, (400, 500), (96, 72)),
    "release": ([t[0] for t in TASKS], 20, (850, 1000), (64, 48)),
}

# marker placement: image (u, v) in 0..1 from the joint proxies (see the module docstring)
GAIN = 0.6
U0 = {"left": 0.3, "right": 0.7}
V_SIGN = {"left": -1.0, "right": 1.0}  # image v (down) per +x of the arm's first proxy joint
HOME = np.array([0.0, -0.6, 0.9, 0.0, 0.4, 0.0])  # ALOHA-like joint home (rad)
BOUND = 0.5  # |proxy - home| limit (rad)
RIGHT_COLOUR = (40, 200, 250)
DIRECTIONS = ("+x", "-x", "+y", "-y")
# Block timing (nominal seconds, rescaled to fill the episode): a leading idle, then per moving block an approach
# and a carry stretch followed by a both-idle block. Long bouts give every coordination state stable windows of
# T4's 45-frame span (offsets -30..+15 at 50 fps); the idle blocks keep each arm active for under ~30 % of the
# episode, so the 0.70-quantile activity threshold falls below the moving speeds (on the speed ramps at most).
LEAD_S = (0.6, 1.0)
STRETCH_S = (1.0, 1.4)
IDLE_S = (2.8, 3.6)
RAMP = 6  # frames of speed ramp at a bout's start and end


# ---------------------------------------------------------------------------------------------- signals

def _blocks(rng: np.random.Generator, n: int, fps: float) -> list[tuple[str, int, int, int]]:
    """[(kind, start, mid, end)] covering 0..n: kind idle|left|right|both; mid splits approach/carry."""
    lead = rng.uniform(*LEAD_S)
    pair = 2 * np.mean(STRETCH_S) + np.mean(IDLE_S)  # nominal seconds of a moving block + its idle block
    m = max(3, int(round((n / fps - lead) / pair)))
    kinds: list[str] = []
    while len(kinds) < m:
        kinds.extend(str(k) for k in rng.permutation(["left", "right", "both"]))
    kinds = kinds[:m]
    # nominal durations (s): lead idle, then (sub1, sub2, idle) per moving block; rescaled to fill n frames
    durs = [lead]
    for _ in kinds:
        durs += [rng.uniform(*STRETCH_S), rng.uniform(*STRETCH_S), rng.uniform(*IDLE_S)]
    durs_f = np.array(durs) * (n / fps) / sum(durs) * fps
    edges = np.round(np.concatenate([[0.0], np.cumsum(durs_f)])).astype(int)
    edges[-1] = n
    out = [("idle", int(edges[0]), int(edges[1]), int(edges[1]))]
    for b, kind in enumerate(kinds):
        s, mid, e, e2 = (int(x) for x in edges[1 + 3 * b:5 + 3 * b])
        out.append((kind, s, mid, e))
        out.append(("idle", e, e, e2))
    return out


def _arm_track(rng: np.random.Generator, n: int, fps: float, blocks, arm: str):
    """Noise-free joint velocities (n, 6) and gripper (n,) for one arm; plus the direction of each stretch."""
    vel = np.zeros((n, 6))
    grip_open, grip_closed = rng.uniform(0.75, 0.95), rng.uniform(0.1, 0.25)
    grip = np.full(n, grip_open)
    pos = np.zeros(2)  # proxy offset from home, for the bound check
    queue: list[str] = []
    stretches = []
    for kind, s, mid, e in blocks:
        if kind == "idle":
            # release: the gripper re-opens shortly after the idle block starts (if it was closed)
            if s > 0 and grip[s - 1] < grip_open - 1e-6:
                t0 = min(n - 1, s + int(rng.integers(3, 8)))
                _ramp(grip, t0, 10, grip[s - 1], grip_open)
            continue
        if kind not in (arm, "both"):
            continue
        for k, (a, b) in enumerate(((s, mid), (mid, e))):
            if not queue:
                queue = [str(d) for d in rng.permutation(DIRECTIONS)]
            d = queue.pop(0)
            dur = max(1, b - a)
            speed = min(rng.uniform(0.3, 0.6), 0.42 * fps / dur)
            ramp = max(1, min(RAMP, dur // 4))
            # one bout per block: speed ramps up at the block's start and down at its end only, so the arm keeps
            # moving through the approach -> carry turn (no dip that would split the bout's activity)
            up = (np.arange(dur) + 1) / ramp if k == 0 else np.ones(dur)
            down = (dur - np.arange(dur)) / ramp if k == 1 else np.ones(dur)
            prof = np.minimum(1.0, np.minimum(up, down))
            axis = 0 if d[1] == "x" else 1
            sign = 1.0 if d[0] == "+" else -1.0
            disp = sign * speed * prof.sum() / fps
            if abs(pos[axis] + disp) > BOUND:  # keep the arm in range: go the other way, keep the cycle complete
                opp = ("-" if sign > 0 else "+") + d[1]
                if opp in queue:
                    queue[queue.index(opp)] = d
                d, sign, disp = opp, -sign, -disp
            pos[axis] += disp
            vel[a:b, axis] = sign * speed * prof
            if axis == 1:
                vel[a:b, 2] = -0.4 * sign * speed * prof  # the elbow follows the shoulder
            stretches.append((a, b, d))
            if k == 1:  # contact: the gripper closes at the start of the carry stretch
                _ramp(grip, a, 10, grip_open, grip_closed)
    return vel, grip, stretches


def _ramp(x: np.ndarray, t0: int, length: int, a: float, b: float) -> None:
    t1 = min(len(x), t0 + length)
    w = 0.5 - 0.5 * np.cos(np.pi * (np.arange(t1 - t0) + 1) / length)
    x[t0:t1] = a + (b - a) * w
    x[t1:] = b


def episode_signals(seed: int, task_id: str, episode: int, n: int, fps: float = FPS):
    """qpos, qvel (n, 14) float32 and the per-arm stretches [(start, end, direction)] of one sample episode."""
    rng = rng_for(seed, "aist", task_id, episode, "signals")
    blocks = _blocks(rng, n, fps)
    qpos = np.zeros((n, 14))
    qvel = np.zeros((n, 14))
    stretches = {}
    for arm, off in (("left", 0), ("right", 7)):
        vel, grip, stretches[arm] = _arm_track(rng, n, fps, blocks, arm)
        home = HOME + rng.normal(0, 0.03, 6)
        joints = home + np.concatenate([np.zeros((1, 6)), np.cumsum(vel, axis=0)[:-1] / fps])
        qpos[:, off:off + 6] = joints
        qpos[:, off + 6] = grip
        qvel[:, off:off + 6] = vel
        qvel[:, off + 6] = np.gradient(grip) * fps
    qpos += rng.normal(0, 0.0004, qpos.shape)
    qvel += rng.normal(0, 0.006, qvel.shape)
    return qpos.astype(np.float32), qvel.astype(np.float32), blocks, stretches


def marker_uv(qpos: np.ndarray, arm: str) -> np.ndarray:
    """(n, 2) image positions (0..1) of an arm's marker on cam_high from its joint proxies."""
    off = 0 if arm == "left" else 7
    x = qpos[:, off] - np.median(qpos[: max(1, len(qpos) // 50), off])
    y = qpos[:, off + 1] - np.median(qpos[: max(1, len(qpos) // 50), off + 1])
    return np.stack([U0[arm] - GAIN * y, 0.5 + V_SIGN[arm] * GAIN * x], axis=1)


# ---------------------------------------------------------------------------------------------- images

def _draw_marker(img: np.ndarray, xy, gripper_open: float, colour) -> None:
    """A second arm marker with the same geometry as render_frame's."""
    height, width = img.shape[:2]
    band = max(4, height // 8)
    r = max(2, min(width, height) // 10)
    cx = int(np.clip(xy[0], 0, 1) * (width - 2 * r)) + r
    cy = int(np.clip(xy[1], 0, 1) * (height - band - 2 * r)) + band + r
    img[cy - r:cy + r, cx - r:cx + r] = colour
    jaw = int(r * np.clip(gripper_open, 0, 1))
    img[cy - r:cy + r, max(0, cx - r - jaw):max(0, cx - r - jaw) + 2] = (20, 20, 20)
    img[cy - r:cy + r, min(width - 2, cx + r + jaw):min(width - 2, cx + r + jaw) + 2] = (20, 20, 20)


def render_pair(index: int, width: int, height: int, left_uv, left_open, right_uv, right_open,
                hue: int = 0) -> np.ndarray:
    img = render_frame(index, width, height, marker_xy=(float(left_uv[0]), float(left_uv[1])),
                       gripper_open=float(left_open), hue=hue)
    _draw_marker(img, right_uv, right_open, RIGHT_COLOUR)
    return img


def jpeg_rows(frames: list[np.ndarray]) -> np.ndarray:
    """(T, L) uint8: each RGB frame as JPEG bytes, zero-padded to the longest (as ALOHA's compressed episodes)."""
    blobs = []
    for rgb in frames:
        ok, enc = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        blobs.append(enc.tobytes())
    width = max(len(b) for b in blobs)
    out = np.zeros((len(blobs), width), np.uint8)
    for i, b in enumerate(blobs):
        out[i, :len(b)] = np.frombuffer(b, np.uint8)
    return out


# ---------------------------------------------------------------------------------------------- files

def episode_bytes(task_id: str, task_name: str, taxonomy: str, prompt: str, episode: int, n: int,
                  size: tuple[int, int], seed: int = 0, *, frame_rate: int | None = FPS,
                  cameras: tuple[str, ...] = CAMERAS, extra_qpos_rows: int = 0) -> bytes:
    """One episode HDF5 as bytes. Flags produce odd cases: frame_rate=None drops the attr, `cameras` may omit
    cam_high, extra_qpos_rows > 0 makes qpos/qvel longer than the image datasets."""
    fps = FPS if frame_rate is None else frame_rate
    qpos, qvel, _, _ = episode_signals(seed, task_id, episode, n + extra_qpos_rows, fps)
    width, height = size
    uv = {arm: marker_uv(qpos, arm) for arm in ("left", "right")}
    grip = {"left": qpos[:, 6], "right": qpos[:, 13]}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.attrs["Task name"] = task_name
        f.attrs["taxonomy"] = taxonomy
        if frame_rate is not None:
            f.attrs["frame_rate"] = int(frame_rate)
        obs = f.create_group("observations")
        obs.create_dataset("qpos", data=qpos, track_times=False)
        obs.create_dataset("qvel", data=qvel, track_times=False)
        images = obs.create_group("images")
        for cam in cameras:
            hue = 0 if cam == "cam_high" else 70
            frames = []
            for i in range(n):
                lu, ru = uv["left"][i], uv["right"][i]
                if cam != "cam_high":
                    lu, ru = (lu[0], 1 - lu[1]), (ru[0], 1 - ru[1])
                frames.append(render_pair(i, width, height, lu, grip["left"][i], ru, grip["right"][i], hue))
            rows = jpeg_rows(frames)
            images.create_dataset(cam, data=rows, chunks=(1, rows.shape[1]), track_times=False)
        depth = obs.create_group("depth")
        rng = rng_for(seed, "aist", task_id, episode, "depth")
        plane = 800 + 10 * np.arange(16)[None, None, :] + np.zeros((n, 12, 1))
        dmap = (plane + rng.normal(0, 2, (n, 12, 16))).astype(np.uint16)
        depth.create_dataset("cam_high", data=dmap, chunks=(1, 12, 16), compression="gzip", compression_opts=4,
                             track_times=False)
        obs.create_group("sound")
        text = f.create_group("text")
        text.create_dataset("prompt", data=prompt.encode("utf-8"), track_times=False)
    return buf.getvalue()


def write_task_zip(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED,
                   directory: str | None = None) -> None:
    """A zip with sorted members, a fixed date and fixed compression (byte-identical for identical inputs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        if directory:
            info = zipfile.ZipInfo(directory.rstrip("/") + "/", date_time=ZIP_DATE)
            info.create_system = 3
            info.external_attr = (0o40755 << 16) | 0x10
            zf.writestr(info, b"")
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            info.compress_type = compression
            zf.writestr(info, members[name], compress_type=compression,
                        compresslevel=6 if compression == zipfile.ZIP_DEFLATED else None)
    os.replace(tmp, path)


def write_manifest(out_dir: Path) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task_id", "task_name", "taxonomy", "url"])
    for tid, name, taxonomy, _ in TASKS:
        w.writerow([tid, name, taxonomy, f"https://example.invalid/aist_bimanip/{name}.zip?dl=1"])
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    os.replace(tmp, out_dir / MANIFEST)


def frame_count(seed: int, task_id: str, episode: int, frames: tuple[int, int]) -> int:
    return int(rng_for(seed, "aist", task_id, episode, "length").integers(frames[0], frames[1] + 1))


def release_units(seed: int = 0, units_factor: int | float = 1) -> int:
    """Episodes the release scale writes with units factor K (a ValueError when K leaves a task none)."""
    d_tasks, d_eps, _, _ = SCALES["release"]
    return len(d_tasks) * scaled(d_eps, units_factor, "aist", "episode per task")


def write(out_dir: Path, scale: str = "demo", seed: int = 0, *, tasks: list[str] | None = None,
          episodes: int | None = None, frames: tuple[int, int] | None = None, size: tuple[int, int] | None = None,
          compression: int = zipfile.ZIP_DEFLATED, units_factor: int | float = 1) -> None:
    """Write the sample corpus for `scale` (demo | release) into `out_dir`; keywords shrink it for tests;
    `units_factor` K: K times the release scale's episodes per task."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; known: {sorted(SCALES)}")
    if units_factor != 1 and scale != "release":
        raise ValueError(f"units_factor {units_factor} applies to the release scale only, not {scale!r}")
    d_tasks, d_eps, d_frames, d_size = SCALES[scale]
    d_eps = scaled(d_eps, units_factor, "aist", "episode per task")
    tasks = d_tasks if tasks is None else tasks
    episodes = d_eps if episodes is None else episodes
    frames = d_frames if frames is None else frames
    size = d_size if size is None else size
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(out_dir)
    by_id = {t[0]: t for t in TASKS}
    for tid in tasks:
        _, name, taxonomy, prompt = by_id[tid]
        members = {}
        for ep in range(episodes):
            n = frame_count(seed, tid, ep, frames)
            # the one realistic odd case in the default corpus: an episode without the frame_rate attr
            rate = None if (tid == "task_066" and ep == 2) else FPS
            members[f"{name}/episode_{ep}.hdf5"] = episode_bytes(tid, name, taxonomy, prompt, ep, n, size, seed,
                                                                 frame_rate=rate)
        write_task_zip(out_dir / f"{name}.zip", members, compression=compression, directory=name)
