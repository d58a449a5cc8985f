"""RH20T sample corpus in the real resized-release layout (docs/upstream-formats.md, RH20T).

    write(out_dir, "demo")     -> <out_dir>/RH20T_cfg2.tar.gz   (deterministic tar; exercises the archive path)
    write(out_dir, "release")  -> <out_dir>/RH20T_cfg2/         (extracted folder; 596 robot scenes, 76 tasks)

Per robot scene `task_XXXX_user_XXXX_scene_XXXX_cfg_0002/`: metadata.json, two cameras (the cfg2 shoulder camera
036422060215 and the overhead 104122061850) each with color.mp4 (H.264, ~10 Hz) and timestamps.npy (np.save of
{'color': [ms], 'depth': [ms]}), and transformed/{tcp_base,tcp,force_torque_base,force_torque,gripper}.npy
(+ high_freq_data.npy in the demo, joint.npy in some demo scenes) as pickled dicts keyed by camera serial,
aligned to each camera's timestamps. calib/<ts>/{intrinsics,extrinsics,tcp}.npy sit at the cfg root. Odd cases
in the default corpora: a `_human` folder (cameras only), a scene without transformed/gripper.npy, rating 0/1
failures and -1, and transformed lists that stop one step before the camera's last frame (seen by the
reference build).

Signals follow idle -> approach (x leg, then y leg + descent) -> grasp (width closes, zeroed force rises) -> carry
(-x leg + lift, holding: force stays up) -> transfer (-y leg + descent) -> release (width opens, force falls) ->
retreat -> idle, so the base-frame motion covers +-x and +-y (all four image directions on 036422060215, whose
fitted mapping is base +x = image up, +y = image left). Failures: rating 1 = missed grasp (gripper closes to ~2 mm,
no force) or dropped object (force and width collapse mid-carry); rating 0 = emergency stop (motion freezes).

Tests build odd copies with `SceneSpec` (omit files, damaged video, frame/timestamp count mismatch, ...) and
`write_root`.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .common import encode_video, render_frame, rng_for, scaled

PRIMARY = "036422060215"  # cfg2 "shoulder" camera (the one ProcessBench used)
OVERHEAD = "104122061850"  # cfg2 "overhead" camera
CAMERAS = (PRIMARY, OVERHEAD)
CFG_DIR = "RH20T_cfg2"
BASE_MS = 1_680_000_000_000  # recordings in 2023 (Unix ms)
TAR_MTIME = 1_690_000_000  # fixed member mtime in the tar
SIZES = {"demo": (96, 54), "release": (64, 36)}  # real: 640x360
GRIPPER_MAX_MM = 95.0  # Dahuan AG-95 stroke


@dataclass(frozen=True)
class SceneSpec:
    task: int
    user: int
    scene: int
    cfg: int = 2
    rating: int = 5
    n_frames: int = 180
    human: int | None = None  # None: robot scene; 0: "_human"; k: "_human_k"
    failure: str | None = None  # miss | drop | estop; default derived from the rating (0 -> estop, 1 -> miss/drop)
    omit: tuple[str, ...] = ()  # scene-relative files to leave out (e.g. "transformed/gripper.npy")
    high_freq: bool = True  # transformed/high_freq_data.npy (its presence varies in the real archive)
    joint: bool = False  # transformed/joint.npy (usually a separate RH20T_joint archive)
    transformed_drop_last: bool = False  # transformed lists stop one step before the cameras' last frame
    video_frame_delta: int = 0  # primary color.mp4 frames minus timestamps (odd case)
    video_damage: str | None = None  # "truncate" | "garbage" (odd case, primary camera)
    calib: int = BASE_MS - 86_400_000

    @property
    def name(self) -> str:
        base = f"task_{self.task:04d}_user_{self.user:04d}_scene_{self.scene:04d}_cfg_{self.cfg:04d}"
        if self.human is None:
            return base
        return base + ("_human" if self.human == 0 else f"_human_{self.human}")


# ---------------------------------------------------------------------------------------------------------------
# encoding and serialisation
# ---------------------------------------------------------------------------------------------------------------




def npy_bytes(obj) -> bytes:
    """np.save bytes (a dict becomes a pickled 0-d object array, as RH20T's files are)."""
    bio = io.BytesIO()
    np.save(bio, obj, allow_pickle=True)
    return bio.getvalue()


# ---------------------------------------------------------------------------------------------------------------
# signals
# ---------------------------------------------------------------------------------------------------------------


def _minjerk(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    s = np.arange(1, n + 1) / n
    s = 10 * s**3 - 15 * s**4 + 6 * s**5
    return a + (b - a) * s[:, None]


def _ramp(arr: np.ndarray, start: int, length: int, value: float) -> None:
    """arr[start:] moves linearly from arr[start-1] to value over `length` frames, then holds."""
    n = len(arr)
    if start >= n:
        return
    v0 = arr[start - 1] if start > 0 else arr[0]
    for j in range(length):
        if start + j < n:
            arr[start + j] = v0 + (value - v0) * (j + 1) / length
    arr[min(n, start + length):] = value


def trajectory(spec: SceneSpec, seed: int) -> dict:
    """Per-frame (primary camera) signals of one robot scene, plus phase boundaries."""
    rng = rng_for(seed, "rh20t", spec.name, "trajectory")
    n = spec.n_frames
    failure = spec.failure
    if failure is None and spec.rating == 0:
        failure = "estop"
    elif failure is None and spec.rating == 1:
        failure = "miss" if rng.random() < 0.5 else "drop"

    plan = [("idle", int(rng.integers(10, 21))), ("approach_x", int(rng.integers(20, 31))),
            ("approach_y", int(rng.integers(20, 31))), ("grasp", int(rng.integers(10, 15))),
            ("carry", int(rng.integers(22, 35))), ("transfer", int(rng.integers(20, 31))),
            ("release", int(rng.integers(10, 15))), ("retreat", int(rng.integers(20, 31)))]
    if 2 <= spec.rating <= 4:  # a hesitant demo: a pause inside the carry
        k = [p[0] for p in plan].index("carry")
        half = plan[k][1] // 2
        plan[k:k + 1] = [("carry", half), ("pause", int(rng.integers(5, 9))), ("carry2", plan[k][1] - half)]
    budget = n - 4
    total = sum(d for _, d in plan)
    if total > budget:
        f = budget / total
        plan = [(k, max(3, int(d * f))) for k, d in plan]
        while sum(d for _, d in plan) > budget:
            i = int(np.argmax([d for _, d in plan]))
            plan[i] = (plan[i][0], plan[i][1] - 1)

    home = np.array([0.45 + rng.uniform(-0.03, 0.03), rng.uniform(-0.05, 0.05), 0.32 + rng.uniform(-0.02, 0.02)])
    sx, sy = rng.choice([-1.0, 1.0]), rng.choice([-1.0, 1.0])
    dx1, dy1, dx2, dy2 = rng.uniform(0.10, 0.18, 4)
    dz = rng.uniform(0.12, 0.18)
    p1 = home + [sx * dx1, 0.0, 0.0]
    p2 = p1 + [0.0, sy * dy1, -dz]
    p3 = p2 + [-sx * dx2, 0.0, dz * 0.8]
    p4 = p3 + [0.0, -sy * dy2, -dz * 0.7]
    p5 = home + [rng.uniform(-0.02, 0.02), rng.uniform(-0.02, 0.02), 0.0]
    targets = {"approach_x": p1, "approach_y": p2, "carry": p3, "transfer": p4, "retreat": p5}
    carry_mid = None

    pos = np.zeros((n, 3))
    bounds: dict[str, int] = {}
    cur, i = home.copy(), 0
    for kind, d in plan:
        bounds.setdefault(kind, i)
        if kind == "carry" and any(k == "carry2" for k, _ in plan):
            carry_mid = p2 + (p3 - p2) * 0.5
            tgt = carry_mid
        elif kind == "carry2":
            tgt = p3
        else:
            tgt = targets.get(kind, cur)
        seg = _minjerk(cur, tgt, d) if not np.allclose(tgt, cur) else np.repeat(cur[None], d, 0)
        pos[i:i + d] = seg[: max(0, min(d, n - i))]
        cur, i = tgt.copy(), i + d
    pos[i:] = cur
    bounds["end_idle"] = i

    w_open = rng.uniform(80.0, 92.0)
    w_obj = rng.uniform(28.0, 60.0)
    width = np.full(n, w_open)
    fmag = np.zeros(n)
    g0, r0 = bounds["grasp"], bounds["release"]
    close_at, open_at = g0 + 2, r0 + 3
    f_grasp, f_hold = rng.uniform(3.5, 6.0), rng.uniform(3.5, 8.5)
    closed = w_obj if failure != "miss" else rng.uniform(0.5, 3.0)
    _ramp(width, close_at, 4, closed)
    _ramp(width, open_at, 4, w_open)
    if failure == "miss":
        fmag[close_at + 2:close_at + 5] = rng.uniform(0.8, 1.4)
    else:
        _ramp(fmag, close_at + 1, 3, f_grasp)
        carry0 = bounds["carry"]
        fmag[carry0:open_at] = f_hold
        place0 = bounds["release"] - 4
        fmag[place0:open_at] += rng.uniform(1.0, 2.0)  # set-down contact
        _ramp(fmag, open_at + 1, 3, 0.0)
    if failure == "drop":
        lo, hi = bounds["carry"] + 5, max(bounds["carry"] + 6, bounds["release"] - 2)
        at = int(rng.integers(lo, hi))
        _ramp(fmag, at, 2, 0.0)
        _ramp(width, at, 3, rng.uniform(0.5, 3.0))
        _ramp(width, open_at, 4, w_open)
    if failure == "estop":
        lo, hi = bounds["carry"] + 3, max(bounds["carry"] + 4, bounds["release"] - 1)
        at = int(rng.integers(lo, hi))
        pos[at:] = pos[at]
        width[at:] = width[at]
        fmag[at:] = fmag[at]
        bounds["estop"] = at

    # directions: carrying load pulls down (-z); grasp/place contact pushes up
    u_hold = np.array([rng.uniform(-0.15, 0.15), rng.uniform(-0.15, 0.15), -1.0])
    u_hold /= np.linalg.norm(u_hold)
    force = fmag[:, None] * u_hold[None]
    acc = np.gradient(np.gradient(pos, axis=0), axis=0) * 100.0  # m/s^2 at 10 Hz
    force += acc * (fmag[:, None] / 9.81)  # inertial wiggle of the held object
    force += rng.normal(0, 0.12, (n, 3))
    torque = np.cross(np.array([0.0, 0.0, 0.12]), force) + rng.normal(0, 0.02, (n, 3))
    pos = pos + rng.normal(0, 0.0003, (n, 3))
    width = np.clip(width + rng.normal(0, 0.15, n), 0.0, GRIPPER_MAX_MM)
    yaw = rng.uniform(-0.4, 0.4) + np.cumsum(rng.normal(0, 0.002, n))
    quat = np.stack([np.zeros(n), np.cos(yaw / 2), np.sin(yaw / 2), np.zeros(n)], axis=1)  # wxyz, tool down
    finish = bounds.get("estop", bounds["retreat"] if failure is None else n - 1)
    return {"pos": pos, "quat": quat, "width": width, "force": force, "torque": torque, "home": home,
            "w_open": w_open, "finish_index": min(finish, n - 1), "failure": failure, "bounds": bounds}


def _clock(rng: np.random.Generator, t0: int, n: int) -> list[int]:
    dt = 100 + rng.integers(-3, 4, n - 1)
    hiccup = rng.random(n - 1) < 0.01
    dt = dt + np.where(hiccup, rng.integers(20, 60, n - 1), 0)
    return [int(t0)] + [int(t0 + s) for s in np.cumsum(dt)]


def _marker(camera: str, pos: np.ndarray, home: np.ndarray) -> np.ndarray:
    """Image position (0..1, x right, y down) of the TCP. 036422060215 follows the reference build's fitted
    mapping (base +x -> image up, +y -> image left); the overhead camera looks straight down."""
    d = (pos - home) / 0.5
    if camera == PRIMARY:
        return np.stack([0.5 - d[:, 1], 0.5 - d[:, 0] + 0.3 * d[:, 2]], axis=1)
    return np.stack([0.5 + d[:, 0], 0.5 + d[:, 1]], axis=1)


def _cam_pose(camera: str) -> tuple[np.ndarray, np.ndarray]:
    """A fixed base -> camera transform per serial (for tcp.npy / force_torque.npy in the camera frame)."""
    if camera == PRIMARY:
        r = np.array([[0.0, -1.0, 0.0], [-0.6, 0.0, -0.8], [0.8, 0.0, -0.6]])
        t = np.array([0.05, 0.22, 0.95])
    else:
        r = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
        t = np.array([-0.02, -0.45, 1.10])
    return r, t


# ---------------------------------------------------------------------------------------------------------------
# one scene
# ---------------------------------------------------------------------------------------------------------------


def scene_files(spec: SceneSpec, seed: int = 0, size: tuple[int, int] = SIZES["demo"],
                cameras: Sequence[str] = CAMERAS) -> dict[str, bytes]:
    """All files of one scene folder, keyed by path inside the scene folder."""
    if spec.human is not None:
        return _human_files(spec, seed, size, cameras)
    rng = rng_for(seed, "rh20t", spec.name, "clock")
    n = spec.n_frames
    tr = trajectory(spec, seed)
    t0 = BASE_MS + int(rng_for(seed, "rh20t", spec.name, "start").integers(0, 200 * 86_400_000))
    clocks = {PRIMARY: _clock(rng, t0, n)}
    for cam in cameras:
        if cam != PRIMARY:
            clocks[cam] = _clock(rng, t0 + int(rng.integers(15, 70)), n + int(rng.integers(0, 2)))
    t_prim = np.asarray(clocks[PRIMARY], dtype=np.float64)

    def at(cam: str, arr: np.ndarray) -> np.ndarray:
        if cam == PRIMARY:
            return arr
        t = np.asarray(clocks[cam], dtype=np.float64)
        return np.stack([np.interp(t, t_prim, arr[:, k]) for k in range(arr.shape[1])], axis=1)

    files: dict[str, bytes] = {}
    W, H = size
    for cam in cameras:
        ts = clocks[cam]
        files[f"cam_{cam}/timestamps.npy"] = npy_bytes({"color": list(ts), "depth": list(ts)})
        pos = at(cam, tr["pos"])
        width = at(cam, tr["width"][:, None])[:, 0]
        xy = _marker(cam, pos, tr["home"])
        nv = len(ts) + (spec.video_frame_delta if cam == PRIMARY else 0)
        hue = int(rng_for(seed, "rh20t", spec.name, cam).integers(0, 60))
        frames = (render_frame(i, W, H, tuple(xy[min(i, len(ts) - 1)]),
                               float(width[min(i, len(ts) - 1)] / GRIPPER_MAX_MM), hue) for i in range(max(nv, 0)))
        data = encode_video(frames, 10.0, codec="h264", gop=250, name=f"{spec.name}/cam_{cam}/color.mp4")
        if cam == PRIMARY and spec.video_damage == "truncate":
            data = data[: int(len(data) * 0.4)]
        elif cam == PRIMARY and spec.video_damage == "garbage":
            data = rng_for(seed, "garbage", spec.name).integers(0, 256, len(data), dtype=np.uint8).tobytes()
        files[f"cam_{cam}/color.mp4"] = data

    f_bias = np.array([1.1, -0.7, 4.9, 0.05, -0.03, 0.02])
    tcp_base, tcp_cam, ft_base, ft_cam, grip, joint = {}, {}, {}, {}, {}, {}
    cmd_closed = tr["failure"] != "estop"
    for cam in cameras:
        ts = clocks[cam]
        m = len(ts) - (1 if spec.transformed_drop_last else 0)
        pos, quat = at(cam, tr["pos"]), at(cam, tr["quat"])
        frc, trq = at(cam, tr["force"]), at(cam, tr["torque"])
        width = at(cam, tr["width"][:, None])[:, 0]
        r, t = _cam_pose(cam)
        tcp_base[cam], tcp_cam[cam], ft_base[cam], ft_cam[cam], grip[cam], joint[cam] = [], [], [], [], {}, {}
        for i in range(m):
            zeroed = np.concatenate([frc[i], trq[i]])
            robot_ft = zeroed * 0.92 + np.array([0.3, -0.2, 0.5, 0.0, 0.0, 0.0])
            tcp_base[cam].append({"timestamp": ts[i], "tcp": np.concatenate([pos[i], quat[i]]), "robot_ft": robot_ft})
            ft_base[cam].append({"timestamp": ts[i], "raw": zeroed + f_bias, "zeroed": zeroed})
            pc = r @ pos[i] + t
            tcp_cam[cam].append({"timestamp": ts[i], "tcp": np.concatenate([pc, quat[i]]), "robot_ft": robot_ft})
            zc = np.concatenate([r @ frc[i], r @ trq[i]])
            ft_cam[cam].append({"timestamp": ts[i], "raw": zc + f_bias, "zeroed": zc})
            closing = width[i] < tr["w_open"] - 5 and cmd_closed
            grip[cam][ts[i]] = {"gripper_command": [0.0 if closing else float(round(tr["w_open"])), 50.0, 30.0],
                                "gripper_info": [float(width[i]), 0.0, float(np.linalg.norm(frc[i, :3]) > 2.5)]}
            joint[cam][ts[i]] = np.concatenate([np.sin(pos[i].sum() + np.arange(7)), np.zeros(7)])
    files["transformed/tcp_base.npy"] = npy_bytes(tcp_base)
    files["transformed/force_torque_base.npy"] = npy_bytes(ft_base)
    files["transformed/gripper.npy"] = npy_bytes(grip)
    files["transformed/tcp.npy"] = npy_bytes(tcp_cam)
    files["transformed/force_torque.npy"] = npy_bytes(ft_cam)
    if spec.high_freq:
        hf_t = np.arange(t_prim[0], t_prim[-1], 40.0)  # denser than the cameras (25 Hz here), base frame
        hf_pos = np.stack([np.interp(hf_t, t_prim, tr["pos"][:, k]) for k in range(3)], axis=1)
        hf_f = np.stack([np.interp(hf_t, t_prim, tr["force"][:, k]) for k in range(3)], axis=1)
        files["transformed/high_freq_data.npy"] = npy_bytes({"base": [
            {"timestamp": int(t), "zeroed": np.concatenate([f, np.zeros(3)]),
             "raw": np.concatenate([f, np.zeros(3)]) + f_bias, "tcp": np.concatenate([p, tr["quat"][0]])}
            for t, p, f in zip(hf_t, hf_pos, hf_f)]})
    if spec.joint:
        files["transformed/joint.npy"] = npy_bytes(joint)
    crng = rng_for(seed, "rh20t", spec.name, "meta")
    meta = {"finish_time": int(clocks[PRIMARY][tr["finish_index"]]), "rating": int(spec.rating),
            "calib": int(spec.calib), "calib_quality": int(crng.choice([2, 3, 3, 4, 4, 4, 5, 5]))}
    files["metadata.json"] = json.dumps(meta).encode()
    for rel in spec.omit:
        files.pop(rel, None)
    return files


def _human_files(spec: SceneSpec, seed: int, size: tuple[int, int], cameras: Sequence[str]) -> dict[str, bytes]:
    rng = rng_for(seed, "rh20t", spec.name, "human")
    n = spec.n_frames
    t0 = BASE_MS + int(rng.integers(0, 200 * 86_400_000))
    files = {}
    for cam in cameras:
        ts = _clock(rng, t0 + int(rng.integers(0, 60)), n)
        path = 0.5 + 0.3 * np.sin(np.linspace(0, np.pi, n))
        frames = (render_frame(i, size[0], size[1], (float(path[i]), 0.6), 1.0, 120) for i in range(n))
        files[f"cam_{cam}/color.mp4"] = encode_video(frames, 10.0, codec="h264", gop=250,
                                                     name=f"{spec.name}/cam_{cam}/color.mp4")
        files[f"cam_{cam}/timestamps.npy"] = npy_bytes({"color": ts, "depth": ts})
    return files


def calib_files(calib_ts: Sequence[int], cameras: Sequence[str] = CAMERAS) -> dict[str, bytes]:
    """calib/<ts>/{intrinsics,extrinsics,tcp}.npy (intrinsics for 1280x720, as RH20T's)."""
    files = {}
    for k, ts in enumerate(calib_ts):
        intr, extr = {}, {}
        for cam in cameras:
            intr[cam] = np.array([[912.0 + k, 0.0, 640.0, 0.0], [0.0, 911.0 + k, 360.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
            r, t = _cam_pose(cam)
            m = np.eye(4)
            m[:3, :3], m[:3, 3] = r, t
            extr[cam] = m[None]
        files[f"calib/{ts}/intrinsics.npy"] = npy_bytes(intr)
        files[f"calib/{ts}/extrinsics.npy"] = npy_bytes(extr)
        files[f"calib/{ts}/tcp.npy"] = npy_bytes(np.array([0.45, 0.0, 0.32, 0.0, 1.0, 0.0, 0.0]))
    return files


# ---------------------------------------------------------------------------------------------------------------
# corpora
# ---------------------------------------------------------------------------------------------------------------

CALIBS = (BASE_MS - 3 * 86_400_000, BASE_MS - 86_400_000, BASE_MS + 90 * 86_400_000)


def demo_specs(seed: int = 0) -> list[SceneSpec]:
    """9 readable robot scenes over 4 tasks (scenes 1-10: both licences; 2 failures + 1 e-stop, one rating -1),
    one scene without transformed/gripper.npy and one _human folder."""
    rng = rng_for(seed, "rh20t", "demo")
    rows = [(1, 1, 1, 5), (1, 3, 6, 1), (1, 7, 3, 8), (8, 1, 2, 7), (8, 10, 7, 0), (59, 7, 6, 6),
            (59, 3, 4, -1), (204, 10, 9, 1), (204, 1, 10, 9)]
    specs = [SceneSpec(t, u, s, rating=r, n_frames=int(rng.integers(150, 201)), joint=(k % 2 == 0),
                       transformed_drop_last=(k == 3), calib=CALIBS[k % 2])
             for k, (t, u, s, r) in enumerate(rows)]
    specs.append(SceneSpec(59, 10, 8, rating=4, n_frames=160, omit=("transformed/gripper.npy",), calib=CALIBS[1]))
    specs.append(SceneSpec(1, 1, 1, human=0, n_frames=80))
    return specs


def release_specs(seed: int = 0, units_factor: int | float = 1) -> list[SceneSpec]:
    """596 readable robot scenes over 76 task ids (ProcessBench's cfg2 scale), ~28 % failures (rating 0/1), a few
    rating -1; plus 2 scenes without gripper.npy and 8 human folders. `units_factor` K: 596 K scenes over the same
    tasks (20 K users; at least 3 scenes a task where they fit, else fewer), K times the human folders."""
    rng = rng_for(seed, "rh20t", "release")
    tasks = sorted(int(t) for t in rng.choice(np.arange(1, 241), 76, replace=False))
    n = scaled(596, units_factor, "rh20t", "scene")
    base = min(3, n // 76)
    counts = base + rng.multinomial(n - base * 76, rng.dirichlet(np.full(76, 4.0)))
    users = max(1, int(20 * units_factor + 0.5))  # 20 K users, at least one
    ratings = np.array([-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    probs = np.array([0.02, 0.07, 0.20, 0.04, 0.06, 0.09, 0.12, 0.14, 0.12, 0.09, 0.05])
    specs: list[SceneSpec] = []
    extra: list[SceneSpec] = []
    for t, c in zip(tasks, counts):
        pairs = rng.choice(max(users * 10, int(c) + 1), int(c) + 1, replace=False)
        for k, p in enumerate(pairs):
            user, scene = int(p // 10) + 1, int(p % 10) + 1
            spec = SceneSpec(t, user, scene, rating=int(rng.choice(ratings, p=probs)),
                             n_frames=int(rng.integers(200, 261)), high_freq=False,
                             transformed_drop_last=bool(rng.random() < 0.15), calib=CALIBS[int(rng.integers(0, 3))])
            if k < c:
                specs.append(spec)
            else:
                extra.append(spec)
    broken = [replace(extra[i], omit=("transformed/gripper.npy",)) for i in (5, 40)]
    humans = [replace(specs[i], human=(0 if j % 3 else 1), n_frames=60) for j, i in enumerate(range(0, n, 75))]
    return specs + broken + humans


def _tarinfo(name: str, size: int | None) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.mtime = TAR_MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    if size is None:
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
    else:
        ti.size, ti.mode = size, 0o644
    return ti


def write_tar_gz(path: Path, files: dict[str, bytes]) -> None:
    """Deterministic tar.gz: sorted members incl. their directories, fixed mtime/uid/gid/names, gzip mtime 0."""
    dirs = {"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)}
    entries = sorted([(d, None) for d in dirs] + list(files.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
                for name, data in entries:
                    tf.addfile(_tarinfo(name, None if data is None else len(data)),
                               None if data is None else io.BytesIO(data))
    os.replace(tmp, path)


def write_folder(base: Path, files: dict[str, bytes]) -> None:
    for rel, data in sorted(files.items()):
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def write_root(out_dir: Path, specs: Sequence[SceneSpec], seed: int = 0, size: tuple[int, int] = SIZES["demo"],
               archive: bool = False, cfg_dir: str = CFG_DIR, calibs: Sequence[int] = CALIBS[:2]) -> Path:
    """Write `specs` as <out_dir>/<cfg_dir>/ (or <cfg_dir>.tar.gz when archive=True); returns the path written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if archive:
        files = {f"{cfg_dir}/{k}": v for k, v in calib_files(calibs).items()}
        for spec in specs:
            files.update({f"{cfg_dir}/{spec.name}/{k}": v for k, v in scene_files(spec, seed, size).items()})
        path = out_dir / f"{cfg_dir}.tar.gz"
        write_tar_gz(path, files)
        return path
    base = out_dir / cfg_dir
    write_folder(base, calib_files(calibs))
    for spec in specs:
        write_folder(base / spec.name, scene_files(spec, seed, size))
    return base


def release_units(seed: int = 0, units_factor: int | float = 1) -> int:
    """Readable robot scenes the release scale writes with units factor K (a ValueError when K leaves none)."""
    return sum(1 for s in release_specs(seed, units_factor) if s.human is None and not s.omit)


def write(
    out_dir: Path, scale: str = "demo", seed: int = 0, archive: bool | None = None, units_factor: int | float = 1
) -> None:
    """Demo: RH20T_cfg2.tar.gz (archive path). Release: the extracted RH20T_cfg2/ folder (596 robot scenes).
    `archive` True/False writes the archive or the extracted folder at any scale (None: the scale's default)."""
    if scale not in SIZES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {sorted(SIZES)}")
    if units_factor != 1 and scale != "release":
        raise ValueError(f"units_factor {units_factor} applies to the release scale only, not {scale!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in (out_dir / CFG_DIR, out_dir / f"{CFG_DIR}.tar.gz"):  # never the same scenes twice in one root
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        elif stale.exists() or stale.is_symlink():
            stale.unlink()
    as_tar = (scale == "demo") if archive is None else bool(archive)
    if scale == "demo":
        write_root(out_dir, demo_specs(seed), seed, SIZES["demo"], archive=as_tar)
    else:
        write_root(out_dir, release_specs(seed, units_factor), seed, SIZES["release"], archive=as_tar, calibs=CALIBS)
