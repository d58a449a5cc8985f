"""RH20T adapter: the resized/mp4 release (`RH20T_cfgN/` folders and/or `RH20T_cfgN.tar.gz` archives).

Layout (docs/upstream-formats.md, RH20T):

    <root>/RH20T_cfg2/                                    extracted folder, and/or
    <root>/RH20T_cfg2.tar.gz                              the archive as downloaded (top-level dir RH20T_cfg2/)
        calib/<ts>/{intrinsics,extrinsics,tcp}.npy        (not needed by the IR)
        task_0059_user_0007_scene_0006_cfg_0002/          one robot scene = one unit (unit_type `recording`)
            metadata.json                                 finish_time, rating, calib, calib_quality (+ maybe more)
            cam_<serial>/color.mp4, cam_<serial>/timestamps.npy   {'color': [ms...], 'depth': [...]}
            transformed/{tcp_base,force_torque_base,gripper}.npy  pickled dicts keyed by camera serial
        task_..._human[_N]/                               paired human demo: skipped, never a unit

A root that is itself an extracted `RH20T_cfgN/` folder (scene folders directly inside), or the `RH20T_cfgN.tar.gz`
file itself (then only that archive is read), is accepted as well.

Decisions (documented in the module so the quarantine reasons make sense):
- Required per scene: metadata.json, the primary camera's color.mp4 + timestamps.npy, transformed/tcp_base.npy,
  transformed/force_torque_base.npy and transformed/gripper.npy (the reference loaders skip scenes missing them).
  A missing one is a UnitError naming the file.
- Clock: timestamps.npy['color'] (ms Unix) integers; frame i of color.mp4 is
  timestamps[i] [I]. If the video's frame count differs from the timestamp count by at most
  `frame_count_tolerance` (default 2) the unit keeps the decodable common prefix; a larger difference is a UnitError.
  A list that is not increasing is sorted with a note, as the official rh20t_api sorts it; duplicates are refused.
  The video's first frame must decode (video.check_first_frame), else the unit is a UnitError naming color.mp4.
- Signals (arm `single`) come from the primary camera's entries of the transformed dicts, matched to each frame's
  timestamp by the nearest sample within `sync_tolerance_ms` (default 100 ms, as the OXE converter); otherwise
  null. pos = tcp_base xyz (m); gripper_width = gripper_info[0]; force = |zeroed[:3]| of force_torque_base;
  speed and gripper_effort are null (RH20T's transformed/ data has no TCP velocity or gripper effort).
- Archives are read without extracting: the first access indexes the tar members in one pass and keeps zlib
  checkpoints, so reading a scene later costs at most one checkpoint span of decompression. The index lives in
  this adapter object (per process). A damaged archive (corrupt or truncated gzip/tar) is never trusted: its
  scenes seen before the damage are listed and each fails with a UnitError naming the damage, the problem is
  recorded in `self.issues`, and other folders/archives still read. SourceError only if nothing is usable.
- All .npy files except plain arrays are pickles; they are loaded with a restricted unpickler that only admits
  numpy array/scalar reconstruction, never arbitrary objects.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from upstream_adapters.media import video
from upstream_adapters.base import (
    SourceAdapter,
    check_unit_id,
    load_json,
    path_free,
    read_metadata,
    require_root,
    safe_join,
)
from upstream_adapters.rh20t.scenes import CFG_DIR_RE, CFG_TAR_RE, SCENE_RE, _Archive, _FolderScene, _TarScene
from upstream_adapters.rh20t.parse import _col, _int_ms, _nearest, _samples, _serial_entry
from upstream_adapters.limits import ArchiveLimits
from upstream_adapters.storage.pickles import load_npy
from upstream_adapters.ir import (
    FRAMES_SCHEMA,
    SEGMENTS_SCHEMA,
    SIGNALS_SCHEMA,
    SourceError,
    UnitError,
    UnitIR,
    empty,
)

log = logging.getLogger(__name__)

CAMERA_RE = re.compile(r"[A-Za-z0-9_-]+")

REQUIRED_TRANSFORMED = ("transformed/tcp_base.npy", "transformed/force_torque_base.npy", "transformed/gripper.npy")


def licence_for_scene(scene_number: int) -> str:
    """RH20T licence per scene id (project page): scenes 1-5 CC BY-SA 4.0, 6-10 CC BY-NC 4.0."""
    if 1 <= scene_number <= 5:
        return "CC BY-SA 4.0"
    if 6 <= scene_number <= 10:
        return "CC BY-NC 4.0"
    return "unknown"


def parse_scene_name(name: str) -> dict:
    """Ids of a robot scene folder name; ValueError if it is not one (human folders are not)."""
    m = SCENE_RE.fullmatch(name)
    if not m:
        raise ValueError(f"{name!r} is not an RH20T robot scene folder name")
    return {
        "task_id": name.split("_user_")[0],
        "operator_id": f"user_{m.group(2)}",
        "scene_id": f"scene_{m.group(3)}",
        "config_id": f"cfg_{m.group(4)}",
        "scene_number": int(m.group(3)),
        "cfg_number": int(m.group(4)),
    }


# ---------------------------------------------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------------------------------------------


class Rh20tAdapter(SourceAdapter):
    slug = "rh20t"
    name = "RH20T"
    layout = "RH20T_cfgN/ folders or RH20T_cfgN.tar.gz archives of task_*_user_*_scene_*_cfg_* scene folders"
    unit_type = "recording"
    options = {
        "camera": "primary camera serial, folder cam_<serial> (default 036422060215)",
        "cfgs": "configurations read, e.g. [cfg2] (default [cfg2]; null = all present)",
        "sync_tolerance_ms": "largest gap (ms) between a frame and the signal sample matched to it (default 100)",
        "frame_count_tolerance": "largest gap between video frames and timestamps kept as the common prefix "
        "(default 2)",
        "archive_limits": "{max_member_bytes, max_compression_ratio, max_archive_bytes}: a tar.gz member past them "
        "is refused (its scene quarantined), an archive past max_archive_bytes is not read further",
    }

    def __init__(
        self,
        camera: str = "036422060215",
        cfgs: Sequence[str | int] | None = ("cfg2",),
        sync_tolerance_ms: float = 100.0,
        frame_count_tolerance: int = 2,
        archive_limits: ArchiveLimits | dict | None = None,
    ):
        camera = str(camera)
        if camera.startswith("cam_"):
            camera = camera[4:]
        if not CAMERA_RE.fullmatch(camera):
            raise ValueError(f"invalid RH20T camera serial {camera!r}")
        self.camera = camera
        self.cfgs = None if cfgs is None else frozenset(self._cfg_number(c) for c in cfgs)
        self.sync_tolerance_ms = float(sync_tolerance_ms)
        self.frame_count_tolerance = int(frame_count_tolerance)
        self.archive_limits = ArchiveLimits.of(archive_limits)
        super().__init__()

    def _init_state(self) -> None:
        self._archives: dict[str, _Archive] = {}
        self._lock = threading.Lock()
        self._languages: dict[str, tuple[tuple, dict]] = {}

    @staticmethod
    def _cfg_number(c) -> int:
        m = re.fullmatch(r"(?:RH20T_)?(?:cfg_?)?0*(\d+)", str(c).strip())
        if not m:
            raise ValueError(f"invalid RH20T cfg {c!r} (expected e.g. 'cfg2')")
        return int(m.group(1))

    def _selected(self, n: int) -> bool:
        return self.cfgs is None or n in self.cfgs

    # -- containers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _split_root(root: Path) -> tuple[Path, str | None]:
        """(folder, archive name) when the root given is an `RH20T_cfgN.tar.gz` file itself, else (root, None)."""
        root = Path(root)
        if CFG_TAR_RE.fullmatch(root.name) and root.is_file():
            return root.parent, root.name
        return root, None

    def _containers(self, root: Path) -> tuple[list[tuple[str, str, int]], list[str]]:
        """[(kind 'dir'|'tar'|'root', name relative to root, cfg number)] present in root, and unselected names."""
        found, skipped = [], []
        root, only = self._split_root(root)
        if only is not None:
            cfg = int(CFG_TAR_RE.fullmatch(only).group(1))
            return ([("tar", only, cfg)], []) if self._selected(cfg) else ([], [only])
        names = sorted(os.listdir(root))
        for n in names:
            m_dir, m_tar = CFG_DIR_RE.fullmatch(n), CFG_TAR_RE.fullmatch(n)
            if m_dir and os.path.isdir(os.path.join(root, n)):
                kind, cfg = "dir", int(m_dir.group(1))
            elif m_tar and os.path.isfile(os.path.join(root, n)):
                kind, cfg = "tar", int(m_tar.group(1))
            elif m_tar and os.path.isdir(os.path.join(root, n)):  # the archive extracted into a folder of its name
                kind, cfg = "dir", int(m_tar.group(1))
                if os.path.isdir(os.path.join(root, n, f"RH20T_cfg{cfg}")):
                    n = f"{n}/RH20T_cfg{cfg}"
            else:
                continue
            (found if self._selected(cfg) else skipped).append((kind, n, cfg))
        if not found and not skipped and any(SCENE_RE.fullmatch(n) for n in names):
            found.append(("root", "", -1))  # the root is itself an extracted RH20T_cfgN folder
        return found, [n for _, n, _ in skipped]

    def _archive(self, root: Path, name: str) -> _Archive:
        path = safe_join(root, name)
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            arc = self._archives.get(key[0])
            if arc is None or arc.key != key:
                arc = _Archive.build(path, name, key, limits=self.archive_limits)
                self._archives[key[0]] = arc
        return arc

    def _folder_scenes(self, root: Path, prefix: str) -> list[str]:
        base = Path(root, prefix) if prefix else Path(root)
        out = []
        for entry in os.scandir(base):
            if SCENE_RE.fullmatch(entry.name) and (entry.is_dir() or entry.is_symlink()):
                out.append(entry.name)
        return out

    def discover(self, root: Path) -> list[str]:
        self.issues = []
        if self._split_root(root)[1] is None:
            require_root(root, self.slug)
        containers, skipped = self._containers(root)
        root = self._split_root(root)[0]
        if not containers:
            if skipped:
                raise SourceError(
                    f"rh20t: root {root.name!r} holds {skipped} but none of the selected cfgs "
                    f"{sorted(f'cfg{c}' for c in self.cfgs or [])}"
                )
            raise SourceError(
                f"rh20t: root {root.name!r} holds no RH20T_cfgN/ folder, RH20T_cfgN.tar.gz archive "
                "or robot scene folder (expected the RH20T resized release layout)"
            )
        ids: set[str] = set()
        readable = 0
        for kind, name, cfg in containers:
            healthy = True
            if kind == "tar":
                try:
                    arc = self._archive(root, name)
                except (UnitError, OSError) as exc:  # e.g. a symlink pointing outside the root
                    self.issues.append((name, f"archive not read: {getattr(exc, 'reason', None) or exc}"))
                    continue
                healthy = arc.damage is None
                if arc.damage:
                    self.issues.append((name, f"damaged archive: {arc.damage}"))
                    log.warning(
                        "rh20t: archive %s is damaged (%s); %d scenes seen before the damage will be quarantined",
                        name,
                        arc.damage,
                        len(arc.scenes),
                    )
                for bad in arc.ignored[:20]:
                    self.issues.append((name, f"unsafe member name ignored: {bad!r}"))
                scenes = list(arc.scenes)
            else:
                try:
                    scenes = self._folder_scenes(root, name)
                except Exception as exc:  # noqa: BLE001 - one unreadable folder is one row, the others still read
                    self.issues.append((name or ".", f"folder cannot be listed: {type(exc).__name__}"))
                    continue
            for s in scenes:
                scfg = parse_scene_name(s)["cfg_number"]
                if kind == "root" and not self._selected(scfg):
                    continue
                if kind != "root" and scfg != cfg:
                    self.issues.append(
                        (f"{name}/{s}" if kind == "dir" else name, f"scene of cfg {scfg} inside {name} ignored")
                    )
                    continue
                ids.add(s)
                readable += healthy
        if not readable:  # only scenes of damaged archives (or none at all): nothing can be read
            detail = "; ".join(f"{f}: {r}" for f, r in self.issues) or "no robot scene folders found"
            raise SourceError(f"rh20t: root {root.name!r} has no readable RH20T scenes ({detail})")
        return sorted(ids)

    def _locate(self, root: Path, unit_id: str):
        check_unit_id(unit_id)
        try:
            ids = parse_scene_name(unit_id)
        except ValueError as exc:
            raise UnitError(str(exc)) from None
        if not self._selected(ids["cfg_number"]):
            raise UnitError(f"scene {unit_id} belongs to a cfg that is not selected ({sorted(self.cfgs or [])})")
        if not self._split_root(root)[0].is_dir():
            raise UnitError(f"source root {Path(root).name!r} is not a directory")
        containers, _ = self._containers(root)
        root = self._split_root(root)[0]
        for kind, name, cfg in containers:  # extracted folders win over archives (sorted: dir name < tar name)
            if kind in ("dir", "root") and (kind == "root" or cfg == ids["cfg_number"]):
                prefix = f"{name}/" if name else ""
                if os.path.lexists(os.path.join(root, prefix, unit_id)):
                    return _FolderScene(root, prefix, unit_id, self.archive_limits), ids
        for kind, name, cfg in containers:
            if kind == "tar" and cfg == ids["cfg_number"]:
                arc = self._archive(root, name)
                if unit_id in arc.scenes:
                    return _TarScene(root, arc, unit_id), ids
        raise UnitError(
            f"scene {unit_id} not found under RH20T_cfg{ids['cfg_number']}/ or RH20T_cfg{ids['cfg_number']}.tar.gz"
        )

    # -- language -------------------------------------------------------------------------------------------------

    def _language(self, root: Path, unit_id: str, notes: list[str]) -> str | None:
        """The task's English description from the root's task_description.json (read by the metadata rule,
        base.read_metadata); an unreadable table leaves the language null with a note."""
        base = self._split_root(root)[0]
        p = Path(base, "task_description.json")
        if not os.path.lexists(p):
            return None
        try:
            st = os.stat(p)
            key = (st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
        cached = self._languages.get(str(p))
        if cached is None or cached[0] != key or key is None:
            try:
                table = load_json(
                    read_metadata(base, "task_description.json", self.input_limits.max_metadata_bytes),
                    "task_description.json",
                    self.input_limits,
                )
                error = None if isinstance(table, dict) else "not a JSON object"
            except UnitError as exc:
                table, error = {}, exc.reason
            self._languages[str(p)] = cached = (key, table if isinstance(table, dict) else {}, error)
        if cached[2]:
            notes.append(f"task_description.json not read ({cached[2]}): language is null")
            return None
        entry = cached[1].get(unit_id[:9])
        if isinstance(entry, dict):
            text = entry.get("task_description_english")
            return text.strip() if isinstance(text, str) and text.strip() else None
        return entry.strip() if isinstance(entry, str) and entry.strip() else None

    # -- units ----------------------------------------------------------------------------------------------------

    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        scene, ids = self._locate(root, unit_id)
        cam = self.camera
        cameras = scene.cameras()
        if cam not in cameras:
            raise UnitError(
                f"primary camera {cam} has no color.mp4 (cameras: {cameras})", file=scene.where(f"cam_{cam}")
            )
        rel_ts, rel_mp4 = f"cam_{cam}/timestamps.npy", f"cam_{cam}/color.mp4"
        rels = ["metadata.json", rel_ts, *REQUIRED_TRANSFORMED, rel_mp4]
        if isinstance(scene, _FolderScene):
            rels.remove(rel_mp4)  # decoded from the file path
        data = scene.read(rels, json_max=self.input_limits.max_metadata_bytes)

        # metadata.json
        meta = load_json(data["metadata.json"], scene.where("metadata.json"), self.input_limits)
        if not isinstance(meta, dict):
            raise UnitError("metadata.json is not a JSON object", file=scene.where("metadata.json"))
        notes: list[str] = []  # assumptions/repairs for this unit (kept in UnitIR.notes, not fatal)
        rating = meta.get("rating")
        if "rating" not in meta:
            notes.append("metadata.json has no 'rating': rating is null")
        if rating is not None:
            if (
                isinstance(rating, bool)
                or not isinstance(rating, (int, float))
                or not math.isfinite(rating)
                or rating != int(rating)
            ):
                raise UnitError(f"metadata.json rating {rating!r} is not an integer", file=scene.where("metadata.json"))
            rating = int(rating)

        def npy(rel):
            try:
                return load_npy(data[rel])
            except (
                ValueError,
                EOFError,
                pickle.UnpicklingError,
                OSError,
                TypeError,
                AttributeError,
                IndexError,
                KeyError,
            ) as exc:
                raise UnitError(f"{rel} cannot be loaded: {exc}", file=scene.where(rel)) from None

        # clock
        tsobj = npy(rel_ts)
        if not isinstance(tsobj, dict) or "color" not in tsobj:
            raise UnitError(f"{rel_ts} is not a dict with a 'color' list", file=scene.where(rel_ts))
        ts = _int_ms(tsobj["color"], f"{rel_ts}['color']", scene.where(rel_ts))
        if np.any(np.diff(ts) < 0):  # the official API reads sorted(timestamps['color'])
            k = int(np.sum(np.diff(ts) < 0))
            ts = np.sort(ts, kind="stable")
            notes.append(
                f"{rel_ts}['color'] was not increasing ({k} step{'s' if k != 1 else ''} back): sorted, as "
                "the official rh20t_api does (frame i <-> the i-th smallest timestamp)"
            )
        if np.any(np.diff(ts) == 0):
            raise UnitError(
                f"{rel_ts}['color'] is not strictly increasing (duplicate timestamps)", file=scene.where(rel_ts)
            )

        # video: frame count must match the clock (frame i <-> timestamps[i])
        src = scene.video(rel_mp4, data)
        try:
            n_video = video.count_frames(src, max_samples=self.input_limits.max_video_samples)
            if n_video:
                video.check_first_frame(src, max_samples=self.input_limits.max_video_samples)
        except video.DecodeError as exc:
            raise UnitError(f"{rel_mp4} is unreadable: {exc}", file=scene.where(rel_mp4)) from None
        if n_video == 0:
            raise UnitError(f"{rel_mp4} has no frames", file=scene.where(rel_mp4))
        if n_video != len(ts):
            if abs(n_video - len(ts)) > self.frame_count_tolerance:
                raise UnitError(
                    f"{rel_mp4} has {n_video} frames but {rel_ts}['color'] has {len(ts)} timestamps "
                    f"(tolerance {self.frame_count_tolerance})",
                    file=scene.where(rel_mp4),
                )
        n = min(n_video, len(ts))
        if n_video != len(ts):
            n = self._decodable(src, n, scene.where(rel_mp4))
            notes.append(
                f"{rel_mp4} has {n_video} frames but {rel_ts}['color'] has {len(ts)} timestamps: "
                f"kept the first {n} (frame i <-> timestamps[i])"
            )
        if n < 2:
            raise UnitError(f"{rel_mp4} has fewer than 2 timestamped frames", file=scene.where(rel_mp4))
        ts = ts[:n]
        t_sec = (ts - ts[0]) / 1000.0
        fps = 1000.0 / float(np.median(np.diff(ts)))

        # signals on the primary camera's frames
        tol = self.sync_tolerance_ms
        rel_tcp, rel_ft, rel_gr = REQUIRED_TRANSFORMED
        tcp_ts, tcp = _samples(
            _serial_entry(npy(rel_tcp), cam, rel_tcp, scene.where(rel_tcp)), rel_tcp, scene.where(rel_tcp), "tcp", 3
        )
        ft_ts, ft = _samples(
            _serial_entry(npy(rel_ft), cam, rel_ft, scene.where(rel_ft)), rel_ft, scene.where(rel_ft), "zeroed", 3
        )
        gr_ts, gr = _samples(
            _serial_entry(npy(rel_gr), cam, rel_gr, scene.where(rel_gr)), rel_gr, scene.where(rel_gr), "gripper_info", 1
        )
        pos = (
            [_nearest(tcp_ts, tcp[:, k], ts, tol) for k in range(3)] if tcp.shape[1] >= 3 else [np.full(n, np.nan)] * 3
        )
        force = _nearest(ft_ts, np.linalg.norm(ft[:, :3], axis=1), ts, tol) if ft.shape[1] >= 3 else np.full(n, np.nan)
        width = _nearest(gr_ts, gr[:, 0], ts, tol)
        for rel, chan, arr in ((rel_tcp, "pos", pos[0]), (rel_ft, "force", force), (rel_gr, "gripper_width", width)):
            k = int(np.isnan(arr).sum())
            if k:
                notes.append(f"{rel}: no usable sample within {tol:g} ms for {k} of {n} frames ({chan} null there)")

        frame_index = pa.array(np.arange(n, dtype=np.int64))
        t_col = pa.array(t_sec, type=pa.float64())
        frames = pa.table(
            {
                "source": pa.array([self.slug] * n, pa.string()),
                "unit_id": pa.array([unit_id] * n, pa.string()),
                "camera": pa.array([cam] * n, pa.string()),
                "frame_index": frame_index,
                "t_sec": t_col,
                "native_ts": pa.array(ts.astype(np.float64), type=pa.float64()),
            },
            schema=FRAMES_SCHEMA,
        )
        nulls = pa.nulls(n, pa.float64())
        signals = pa.table(
            {
                "source": pa.array([self.slug] * n, pa.string()),
                "unit_id": pa.array([unit_id] * n, pa.string()),
                "arm": pa.array(["single"] * n, pa.string()),
                "frame_index": frame_index,
                "t_sec": t_col,
                "pos_x": _col(pos[0]),
                "pos_y": _col(pos[1]),
                "pos_z": _col(pos[2]),
                "speed": nulls,  # RH20T transformed/ records no TCP velocity: never invented here
                "gripper_effort": nulls,
                "gripper_width": _col(width),
                "force": _col(force),
                "speed_full": nulls,
            },
            schema=SIGNALS_SCHEMA,
        )
        unit = {
            "source": self.slug,
            "unit_id": unit_id,
            "unit_type": self.unit_type,
            "task_id": ids["task_id"],
            "operator_id": ids["operator_id"],
            "scene_id": ids["scene_id"],
            "config_id": ids["config_id"],
            "taxonomy": None,
            "official_split": None,
            "cameras": cameras,
            "camera": cam,
            "fps": fps,
            "num_frames": int(n),
            "arm_layout": "single_arm",
            "licence": licence_for_scene(ids["scene_number"]),
            "rating": rating,
            "language": self._language(root, unit_id, notes),
        }
        for note in notes:
            log.info("rh20t: %s: %s", unit_id, note)
        return UnitIR(unit=unit, frames=frames, signals=signals, segments=empty(SEGMENTS_SCHEMA), notes=notes)

    def _decodable(self, src, keep: int, where: str) -> int:
        """`keep` lowered past trailing frames that do not decode, so no item references a frame that does not."""
        for last in range(keep - 1, max(-1, keep - 2 - self.frame_count_tolerance), -1):
            try:
                video.read_frames(src, [last], max_samples=self.input_limits.max_video_samples)
                return last + 1
            except video.DecodeError:
                continue
        raise UnitError("the last frames of the video do not decode", file=where)

    # -- frames ---------------------------------------------------------------------------------------------------

    def unit_files(self, root: Path, unit_id: str) -> list[tuple[str, Path, tuple | None]]:
        scene, _ = self._locate(root, unit_id)
        return scene.files()

    def read_frames(
        self, root: Path, unit_id: str, camera: str, indices: Sequence[int], decoder: str = "auto", threads: int = 1
    ) -> dict[int, np.ndarray]:
        camera = str(camera)
        camera = camera[4:] if camera.startswith("cam_") else camera
        if not CAMERA_RE.fullmatch(camera):
            raise UnitError(f"invalid camera serial {camera!r}")
        idx = [int(i) for i in indices]
        if not idx:
            return {}
        scene, _ = self._locate(root, unit_id)
        rel = f"cam_{camera}/color.mp4"
        src = scene.video(rel)
        try:
            got = video.read_frames(
                src, idx, decoder=decoder, threads=threads, max_samples=self.input_limits.max_video_samples
            )
        except video.DecodeError as exc:
            msg = f"{rel}: {exc}"
            raise UnitError(
                path_free(msg, src, scene.where(rel)) if isinstance(src, Path) else msg, file=scene.where(rel)
            ) from None
        return {i: got[i] for i in idx}
