"""REASSEMBLE (TU Wien HDF5 release) -> episode IR.

Layout read (docs/upstream-formats.md, REASSEMBLE; checked against the authors' `REASSEMBLE/io.py` and the third-party
daft-physical-ai reader):

    <root>/data/<YYYY-MM-DD-HH-MM-SS>.h5        one recording = one isolation unit (unit id = file stem);
                                                or <root>/<rec>.h5 side by side (a flat folder, no data/)
    <root>/poses/<rec>_poses.json               camera/board poses (not needed for the IR)
    <root>/splits/{train_split1,test_split1}.txt  one recording id per line, no extension

Inside a recording:
    hama1, hama2, hand, capture_node-camera-image   scalar opaque (np.void) datasets = whole MP4 files
    timestamps/<stream>                             float64 Unix seconds, (N,) or (N, 1)
    robot_state/<stream>                            float64 at the stream's native rate (merged form), or the
                                                    older per-axis form (measured_force_x, pose_qw, pos_joint8...)
    segments_info/<i>/{start,end,success,text,index, low_level/<j>/{start,end,success,text}}

Choices (each also in the module's test file):
- Cameras = the root-level scalar opaque datasets, sorted. The primary camera (option `camera`, default `hand`)
  must exist, else the unit fails with "camera 'hand' missing" (real: 2025-01-10-16-17-40 has no `hand`).
- Frame clock: frame i of a camera = position i in `timestamps/<camera>`; t_sec is seconds from the camera's
  first timestamp, native_ts the Unix seconds. num_frames = min(len(timestamps), packets in the MP4); a
  mismatch keeps the common prefix. The MP4 container is opened (packets counted, not decoded) in `read_unit`,
  so a blob that is not a readable MP4 fails the unit there; a blob whose container opens but whose frames do
  not decode fails in `read_frames` (UnitError).
- fps = the MP4 stream's nominal rate; if the container declares none, 1 / median timestamp step.
- Signals (arm `single`), each stream resampled onto the camera's timestamps by nearest timestamp (ties go to
  the earlier sample, as ProcessBench's `nearest_timestamp_indices`); a frame whose nearest sample is further
  than `max_signal_gap_s` away gets null for that channel (e.g. the real "pose not available for the last
  action" recording), nothing is extrapolated:
    pos_x/y/z     = robot_state/pose[:, 0:3]                (pose is x, y, z, qw, qx, qy, qz)
    speed         = ||robot_state/velocity[:, 0:3]||        (translational, m/s; the signal ProcessBench's T6 uses)
    gripper_width = gripper_positions[:, 0] + gripper_positions[:, 1]   (the two Franka finger joints, m)
    force         = ||robot_state/measured_force||          (the ~1 kHz F/T sensor reading, N, NOT re-zeroed here)
    gripper_effort= null: the release has gripper_efforts, but finger joint efforts are not the grasp-effort
                    signal the label rules expect (GM-100 style effort drop); REASSEMBLE contact comes from the
                    low-level labels (+ force), so the channel is left null rather than mis-used.
  measured_force is preferred over compensated_base_force because it is the F/T sensor's own reading at the
  highest rate (~1000 Hz vs ~465 Hz), present in both robot_state forms; compensated_base_force is a derived
  base-frame estimate. A missing stream leaves its channel null.
- Segments (read by reassemble_segments.py): level `high` = each segments_info/<i> group (seg_index = i, the
  group name); level `low` = its low_level/<j> children (seg_index = j, parent_index = i); "Low_level" is accepted
  too. start/end (Unix s) map to primary-camera frames as ProcessBench does: start_frame = searchsorted(ts, start,
  'left'), end_frame = searchsorted(ts, end, 'right') - 1, clipped to [0, num_frames-1]. A segment lying wholly
  outside the camera's time range (e.g. before the first frame when the hand camera starts late), or so
  short that it contains no frame, is dropped. A partly covered segment keeps its clipped frames, while
  start_sec/end_sec keep the annotation's own times relative to frame 0 (so start_sec < 0 shows a clipped
  start). A group whose `index` dataset disagrees with its name fails the unit (the authors' loader asserts it).
- official_split = the stem of the splits/*.txt file(s) listing the recording (sorted, comma-joined if several),
  null if none. Licence CC BY 4.0 for every unit; language null (segment texts are in `segments`).
"""

from __future__ import annotations

import io
import os
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import av
import h5py
import numpy as np
import pyarrow as pa

from upstream_adapters.media import video
from upstream_adapters.base import (
    SourceAdapter,
    check_unit_id,
    hdf5_read,
    read_metadata_bytes,
    refuse_hdf5_links,
    require_root,
    safe_join,
)
from upstream_adapters.ir import (
    FRAMES_SCHEMA,
    SEGMENTS_SCHEMA,
    SIGNALS_SCHEMA,
    SourceError,
    UnitAbsent,
    UnitError,
    UnitIR,
    float_column,
    to_table,
)
from upstream_adapters.reassemble.segments import segment_rows

SLUG = "reassemble"
LICENCE = "CC BY 4.0"

# Older files keep robot_state unmerged, one dataset per axis (REASSEMBLE/io.py merge_dict_keys): the merged
# stream name -> its per-axis keys, in column order. Their timestamps are stored per axis key as well.
PER_AXIS = {
    "measured_force": ["measured_force_x", "measured_force_y", "measured_force_z"],
    "measured_torque": ["measured_torque_x", "measured_torque_y", "measured_torque_z"],
    "compensated_base_force": ["compensated_base_force_x", "compensated_base_force_y", "compensated_base_force_z"],
    "compensated_base_torque": ["compensated_base_torque_x", "compensated_base_torque_y", "compensated_base_torque_z"],
    "pose": ["pose_x", "pose_y", "pose_z", "pose_qw", "pose_qx", "pose_qy", "pose_qz"],
    "velocity": ["vel_x", "vel_y", "vel_z", "vel_qx", "vel_qy", "vel_qz"],
    "joint_positions": [f"pos_joint{i}" for i in range(1, 8)],
    "gripper_positions": ["pos_joint8", "pos_joint9"],
    "joint_velocities": [f"vel_joint{i}" for i in range(1, 8)],
    "gripper_velocities": ["vel_joint8", "vel_joint9"],
    "joint_efforts": [f"eff_joint{i}" for i in range(1, 8)],
    "gripper_efforts": ["eff_joint8", "eff_joint9"],
}


def _nearest(src_ts: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the nearest `src_ts` sample for every query time (ties -> earlier) and its distance (s)."""
    n = src_ts.size
    idx = np.clip(np.searchsorted(src_ts, query, side="left"), 0, n - 1)
    left = np.clip(idx - 1, 0, n - 1)
    take_left = np.abs(src_ts[left] - query) <= np.abs(src_ts[idx] - query)
    best = np.where(take_left, left, idx)
    return best, np.abs(src_ts[best] - query)


class ReassembleAdapter(SourceAdapter):
    slug = SLUG
    name = "REASSEMBLE"
    layout = "data/ with one <recording>.h5 per recording (or the .h5 files themselves) and splits/*.txt"
    unit_type = "recording"
    options = {
        "camera": "primary camera dataset at the HDF5 root (default hand)",
        "only_split": "read only the recordings listed in splits/<name>.txt (default: every data/*.h5)",
        "max_signal_gap_s": "largest gap (s) to the nearest signal sample; beyond it the channel is null (0.25)",
    }

    def __init__(self, camera: str = "hand", only_split: str | None = None, max_signal_gap_s: float = 0.25):
        self.camera = camera
        self.only_split = only_split or None
        self.max_signal_gap_s = float(max_signal_gap_s)
        super().__init__()

    # ------------------------------------------------------------------ discovery
    @staticmethod
    def _prefix(root: Path) -> str:
        """ "data/" for the release layout (data/<rec>.h5), "" for a flat folder of <rec>.h5 files."""
        return "data/" if Path(root, "data").is_dir() else ""

    def _data_dir(self, root: Path) -> Path:
        root = require_root(root, SLUG)
        data = Path(root, self._prefix(root))
        if data == Path(root) and not any(p.suffix == ".h5" for p in Path(root).iterdir()):
            raise SourceError(
                f"{SLUG}: root {root.name!r} has no data/ directory and no .h5 recordings "
                "(expected data/<recording>.h5 or a flat folder of <recording>.h5)"
            )
        return data

    def _split_files(self, root: Path, issues: list | None = None) -> dict[str, list[str]]:
        """split name -> recording ids listed in splits/<name>.txt (empty if there is no splits/). A list that
        cannot be read under the metadata rule (base.read_metadata) is left out and reported in `issues`."""
        out: dict[str, list[str]] = {}
        sdir = Path(root, "splits")
        if not sdir.is_dir():
            return out
        try:
            names = sorted(n for n in os.listdir(sdir) if n.endswith(".txt") and not n.startswith("."))
        except OSError as exc:
            if issues is not None:
                issues.append(("splits", f"split lists cannot be listed: {type(exc).__name__}"))
            return out
        for name in names:
            try:
                data = read_metadata_bytes(root, f"splits/{name}", self.input_limits.max_metadata_bytes)
            except UnitError as exc:
                if issues is not None:
                    issues.append((exc.file, f"split list not read: {exc.reason}"))
                continue
            ids = []
            for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").splitlines(), start=1):
                try:  # one line at a time: a line that is not UTF-8 costs the recording it names, not the list
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    if issues is not None:
                        shown = raw.decode("utf-8", "replace").strip()[:80]
                        issues.append(
                            (
                                f"splits/{name}",
                                f"line {number} of the split list is not UTF-8 text "
                                f"({shown!r}): the recording it names is not read",
                            )
                        )
                    continue
                rid = line.strip()
                if rid.endswith(".h5"):
                    rid = rid[:-3]
                if rid:
                    ids.append(rid)
            out[name[:-4]] = ids
        return out

    def discover(self, root: Path) -> list[str]:
        self.issues = []
        data = self._data_dir(root)
        root = Path(root)
        try:
            ids = sorted(p.stem for p in data.iterdir() if p.suffix == ".h5" and not p.name.startswith("."))
        except OSError as exc:
            raise SourceError(
                f"{SLUG}: the recordings folder of root {root.name!r} cannot be listed ({type(exc).__name__})"
            ) from None
        splits = self._split_files(root, self.issues)
        if self.only_split is not None:
            if self.only_split not in splits:
                why = next((r for f, r in self.issues if f == f"splits/{self.only_split}.txt"), None)
                raise SourceError(
                    f"{SLUG}: root {root.name!r} has no splits/{self.only_split}.txt" + (f" ({why})" if why else "")
                )
            # Every listed recording is returned, present or not: a listed recording missing from data/ then
            # fails in read_unit and is quarantined (visible) instead of silently vanishing.
            ids = sorted(set(splits[self.only_split]))
        if not ids:
            what = f" listed in splits/{self.only_split}.txt" if self.only_split else " (data/*.h5)"
            raise SourceError(f"{SLUG}: root {root.name!r} has no recordings{what}")
        return ids

    # ------------------------------------------------------------------ helpers
    def _h5_path(self, root: Path, unit_id: str) -> tuple[Path, str]:
        check_unit_id(unit_id)
        relpath = f"{self._prefix(root)}{unit_id}.h5"
        path = safe_join(Path(root), relpath)
        if not path.is_file():
            raise UnitAbsent(f"recording file {relpath} missing (not downloaded)", file=relpath)
        return path, relpath

    @staticmethod
    def _open(path: Path, relpath: str) -> h5py.File:
        try:
            return h5py.File(path, "r")
        except (OSError, ValueError) as exc:
            raise UnitError(
                f"cannot open HDF5 file: {exc.__class__.__name__}: {str(exc).split(' (')[0]}", file=relpath
            ) from exc

    @staticmethod
    def _cameras(h5: h5py.File) -> list[str]:
        cams = []
        for name, obj in h5.items():
            if isinstance(obj, h5py.Dataset) and obj.shape == () and obj.dtype.kind == "V":
                cams.append(name)
        return sorted(cams)

    def _timestamps(self, h5: h5py.File, key: str, relpath: str) -> np.ndarray | None:
        ds = h5.get(f"timestamps/{key}")
        if not isinstance(ds, h5py.Dataset):
            return None
        arr = np.asarray(hdf5_read(ds, relpath, self.input_limits), dtype=np.float64)
        if arr.ndim == 2:
            arr = arr[:, 0]  # README: N x 1; io.py flattens to 1-D
        return arr.reshape(-1)

    def _stream(self, h5: h5py.File, name: str, relpath: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(timestamps (N,), values (N, k)) of a robot_state stream in either form, or None if absent."""
        rs = h5.get("robot_state")
        if not isinstance(rs, h5py.Group):
            return None
        if isinstance(rs.get(name), h5py.Dataset):
            vals = np.asarray(hdf5_read(rs[name], relpath, self.input_limits), dtype=np.float64)
            ts = self._timestamps(h5, name, relpath)
        elif name in PER_AXIS and all(isinstance(rs.get(k), h5py.Dataset) for k in PER_AXIS[name]):
            cols = [
                np.asarray(hdf5_read(rs[k], relpath, self.input_limits), dtype=np.float64).reshape(-1)
                for k in PER_AXIS[name]
            ]
            m = min(c.size for c in cols)
            vals = np.stack([c[:m] for c in cols], axis=-1)
            ts = self._timestamps(h5, name, relpath)
            if ts is None:
                ts = self._timestamps(h5, PER_AXIS[name][0], relpath)
        else:
            return None
        if ts is None:
            return None
        if vals.ndim == 1:
            vals = vals[:, None]
        n = min(ts.size, vals.shape[0])
        ts, vals = ts[:n], vals[:n]
        ok = np.isfinite(ts)
        ts, vals = ts[ok], vals[ok]
        if ts.size == 0:
            return None
        if np.any(np.diff(ts) < 0):
            order = np.argsort(ts, kind="stable")
            ts, vals = ts[order], vals[order]
        return ts, vals

    def _on_frames(self, stream, cam_ts: np.ndarray) -> np.ndarray | None:
        if stream is None:
            return None
        ts, vals = stream
        idx, gap = _nearest(ts, cam_ts)
        out = vals[idx].astype(np.float64)
        out[gap > self.max_signal_gap_s] = np.nan
        return out

    @staticmethod
    def _probe_fps(blob: bytes) -> float | None:
        try:
            with av.open(io.BytesIO(blob)) as c:
                if not c.streams.video:
                    return None
                s = c.streams.video[0]
                rate = s.average_rate or s.base_rate or s.guessed_rate
                return float(Fraction(rate)) if rate else None
        except (av.FFmpegError, OSError, ValueError, ZeroDivisionError):
            return None

    # ------------------------------------------------------------------ read_unit
    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        root = Path(root)
        path, relpath = self._h5_path(root, unit_id)
        h5 = self._open(path, relpath)
        try:
            with h5:
                return self._read_open(root, unit_id, h5, relpath)
        except UnitError:
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise UnitError(
                f"unreadable HDF5 content: {exc.__class__.__name__}: {str(exc).split(' (')[0]}", file=relpath
            ) from exc

    def _read_open(self, root: Path, unit_id: str, h5: h5py.File, relpath: str) -> UnitIR:
        refuse_hdf5_links(h5, relpath)  # data from another file must not enter the IR
        cam = self.camera
        cameras = self._cameras(h5)
        if cam not in cameras:
            raise UnitError(f"camera {cam!r} missing (cameras present: {', '.join(cameras) or 'none'})", file=relpath)
        cam_ts = self._timestamps(h5, cam, relpath)
        if cam_ts is None or cam_ts.size == 0:
            raise UnitError(f"timestamps/{cam} missing or empty", file=relpath)
        if not np.all(np.isfinite(cam_ts)) or np.any(np.diff(cam_ts) < 0):
            raise UnitError(f"timestamps/{cam} not finite and monotone", file=relpath)

        blob = bytes(hdf5_read(h5[cam], relpath, self.input_limits))
        try:
            n_video = video.count_frames(blob, max_samples=self.input_limits.max_video_samples)
        except video.DecodeError as exc:
            raise UnitError(f"camera {cam!r} MP4 blob unreadable: {exc}", file=relpath) from exc
        n = min(cam_ts.size, n_video)
        if n <= 0:
            raise UnitError(f"camera {cam!r} has no frames", file=relpath)
        cam_ts = cam_ts[:n]
        fps = self._probe_fps(blob)
        if not fps or not np.isfinite(fps) or fps <= 0:
            steps = np.diff(cam_ts)
            steps = steps[steps > 0]
            fps = float(1.0 / np.median(steps)) if steps.size else None
        if not fps:
            raise UnitError(f"cannot determine the frame rate of camera {cam!r}", file=relpath)
        del blob

        t0 = float(cam_ts[0])
        t_sec = cam_ts - t0
        frame_idx = np.arange(n, dtype=np.int64)

        frames = pa.Table.from_arrays(
            [
                pa.array([SLUG] * n, pa.string()),
                pa.array([unit_id] * n, pa.string()),
                pa.array([cam] * n, pa.string()),
                pa.array(frame_idx, pa.int64()),
                pa.array(t_sec, pa.float64()),
                pa.array(cam_ts, pa.float64()),
            ],
            schema=FRAMES_SCHEMA,
        )

        # ---- signals
        pose = self._on_frames(self._stream(h5, "pose", relpath), cam_ts)
        vel = self._on_frames(self._stream(h5, "velocity", relpath), cam_ts)
        grip = self._on_frames(self._stream(h5, "gripper_positions", relpath), cam_ts)
        force = self._on_frames(self._stream(h5, "measured_force", relpath), cam_ts)
        null = pa.nulls(n, pa.float64())

        def col(arr, fn):  # a channel, null where the stream lacks it or the value is not finite
            return null if arr is None else float_column(fn(arr))

        three = lambda a: a.shape[1] >= 3
        pose3 = pose if pose is not None and three(pose) else None
        signals = pa.Table.from_arrays(
            [
                pa.array([SLUG] * n, pa.string()),
                pa.array([unit_id] * n, pa.string()),
                pa.array(["single"] * n, pa.string()),
                pa.array(frame_idx, pa.int64()),
                pa.array(t_sec, pa.float64()),
                col(pose3, lambda a: a[:, 0]),
                col(pose3, lambda a: a[:, 1]),
                col(pose3, lambda a: a[:, 2]),
                col(vel if vel is not None and three(vel) else None, lambda a: np.linalg.norm(a[:, :3], axis=1)),
                null,  # gripper_effort: see the module docstring
                col(grip if grip is not None and grip.shape[1] >= 2 else None, lambda a: a[:, 0] + a[:, 1]),
                col(force if force is not None and three(force) else None, lambda a: np.linalg.norm(a[:, :3], axis=1)),
                null,
            ],  # speed_full: `speed` is already the translational norm
            schema=SIGNALS_SCHEMA,
        )

        segments = to_table(segment_rows(h5, SLUG, unit_id, cam_ts, t0, relpath, self.input_limits), SEGMENTS_SCHEMA)

        splits = [name for name, ids in self._split_files(root).items() if unit_id in ids]
        unit = {
            "source": SLUG,
            "unit_id": unit_id,
            "unit_type": self.unit_type,
            "task_id": unit_id,  # ProcessBench: source_task_id = recording id
            "operator_id": None,
            "scene_id": None,
            "config_id": None,
            "taxonomy": None,
            "official_split": ",".join(sorted(splits)) if splits else None,
            "cameras": cameras,
            "camera": cam,
            "fps": float(fps),
            "num_frames": int(n),
            "arm_layout": "single_arm",
            "licence": LICENCE,
            "rating": None,
            "language": None,
        }
        return UnitIR(unit=unit, frames=frames, signals=signals, segments=segments)

    # ------------------------------------------------------------------ frames
    def unit_files(self, root: Path, unit_id: str) -> list[tuple[str, Path, tuple | None]]:
        path, relpath = self._h5_path(Path(root), unit_id)
        return [(relpath, path, None)]

    def read_frames(
        self, root: Path, unit_id: str, camera: str, indices: Sequence[int], decoder: str = "auto", threads: int = 1
    ) -> dict[int, np.ndarray]:
        root = Path(root)
        path, relpath = self._h5_path(root, unit_id)
        want = [int(i) for i in indices]
        h5 = self._open(path, relpath)
        try:
            with h5:
                refuse_hdf5_links(h5, relpath)
                ds = h5.get(camera)
                if not (isinstance(ds, h5py.Dataset) and ds.shape == () and ds.dtype.kind == "V"):
                    raise UnitError(f"camera {camera!r} missing", file=relpath)
                if not want:
                    return {}
                blob = bytes(hdf5_read(ds, relpath, self.input_limits))
        except UnitError:
            raise
        except (OSError, KeyError, ValueError) as exc:
            raise UnitError(f"cannot read camera {camera!r}: {exc.__class__.__name__}: {exc}", file=relpath) from exc
        try:
            got = video.read_frames(
                blob, want, decoder=decoder, threads=threads, max_samples=self.input_limits.max_video_samples
            )
        except video.DecodeError as exc:
            raise UnitError(f"camera {camera!r}: {exc}", file=relpath) from exc
        return {i: got[i] for i in want}


__all__ = ["ReassembleAdapter", "PER_AXIS"]
