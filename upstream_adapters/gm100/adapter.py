"""GM-100 adapter: The Great March 100, AgileX Cobot Magic LeRobot release (HF `rhos-ai/gm100-cobotmagic-lerobot`).

Layout read (docs/upstream-formats.md, GM-100): the root is the HF repo folder (a plain copy or a huggingface_hub
snapshot of symlinks) holding `task_XXXXX/` folders, each a standalone LeRobot dataset, v2.x as below or v3.0
(many episodes per data parquet and per mp4, located by meta/episodes/; storage/lerobot_v3.py):

    task_00043/meta/info.json          codebase_version, fps, features{dtype,shape,names,info}, data_path, video_path,
                                       chunks_size, total_episodes ...
    task_00043/meta/episodes.jsonl     {"episode_index": 7, "tasks": [...], "length": 1234}   one line per episode
    task_00043/meta/tasks.jsonl        {"task_index": 0, "task": "<slug-like text>"}          (may be missing)
    task_00043/<data_path>             data/chunk-000/episode_000007.parquet (one row per frame)
    task_00043/<video_path>            videos/chunk-000/observation.images.camera_top/episode_000007.mp4

Paths always come from info.json's `data_path` / `video_path` templates (fields episode_chunk / chunk_index,
episode_index, video_key); fps, cameras (features of dtype "video") and vector widths come from info.json.

Unit = one episode, id `task_00043__episode_000007`, task id `task_00043`. The IR:
- frames: the primary camera only (default `camera_top`): frame_index = parquet row = decoded-video frame index,
  native_ts = parquet `timestamp` (s, LeRobot clock), t_sec = timestamp - timestamp[0].
- signals: arms `left` and `right` (the hardware is dual-arm; per-task single/bimanual typing is derived later):
    pos_x/y/z      = observation.state.arm.position[0:3] (left) / [h:h+3] (right), h = width/2 (= 6)
    speed          = ||observation.state.arm.velocity[0:3]|| / ||[h:h+3]||
    speed_full     = ||observation.state.arm.velocity[0:h]|| / ||[h:2h]|| (the phase rule's speed: its threshold
                     was tuned on the whole 6-vector of the arm)
    gripper_effort = observation.state.effector.effort[0] (left) / [1] (right)
    gripper_width  = observation.state.effector.position[0] / [1]: the gripper opening, m (0 .. 0.066); force = null
  arm.position is six joint angles per arm (rad) and arm.velocity their speeds, as public readers of the real files
  use them: pos_x/y/z are joints 1-3, speeds joint-space norms (docs/upstream-formats.md; `signal_semantics`).
- segments: none (GM-100 ships no native annotations).
- licence: from a dataset card (`README.md` YAML front matter `license:`) in the task folder or the root, else
  "unknown"; cc-by(-sa|-nc)-4.0 map to the IR strings, any other stated licence id is kept verbatim.

Odd cases: missing tasks.jsonl -> language null; primary video shorter/longer than the parquet by at most
`frame_count_tolerance` frames (default 2, as LeRobot's timestamp tolerance) -> cut to the decodable common prefix, with
a note; a larger gap -> UnitError; parquet or primary video not downloaded -> UnitAbsent; another camera not
downloaded -> kept, with a note; unreadable mp4, task folder without meta/info.json, ids/paths escaping the root ->
UnitError. A task folder whose episodes cannot be listed -> placeholder unit `<task>__unlisted` (quarantined).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
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
    typical_units,
)
from upstream_adapters.gm100.signals import COL_GRIP, signals_table
from upstream_adapters.storage import lerobot_v3 as v3
from upstream_adapters.storage.lerobot import (
    card_licence as _card_licence,
    fill as _fill,
    is_v3 as _is_v3,
    read_json_quiet as _read_json_quiet,
    read_jsonl_quiet as _read_jsonl_quiet,
    read_parquet as _read_parquet,
    scan_template as _scan_template,
    stat as _stat,
    DEFAULT_DATA_PATH,
    parse_info,
    VIDEO_PREFIX,
)
from upstream_adapters.ir import (
    FRAMES_SCHEMA,
    SEGMENTS_SCHEMA,
    SourceError,
    UnitAbsent,
    UnitError,
    UnitIR,
    empty,
)

log = logging.getLogger(__name__)

SLUG = "gm100"
TASK_RE = re.compile(r"^task_\d+$")
UNIT_RE = re.compile(r"^(task_\d+)__episode_(\d{6,})$")
PLACEHOLDER = "unlisted"
META_FILES = ("meta/info.json", "meta/tasks.jsonl", "meta/tasks.parquet", "README.md")  # a task's metadata cache stamp

COL_TS = "timestamp"
COL_FRAME = "frame_index"
COL_EPISODE = "episode_index"
COL_TASK = "task_index"
COL_POS = "observation.state.arm.position"
COL_VEL = "observation.state.arm.velocity"
COL_EFFORT = "observation.state.effector.effort"
PARQUET_COLUMNS = (COL_TS, COL_FRAME, COL_EPISODE, COL_TASK, COL_POS, COL_VEL, COL_EFFORT, COL_GRIP)


@dataclass
class _TaskMeta:
    task: str
    info: dict
    fps: float
    data_path: str
    video_path: str | None
    chunks_size: int
    video_keys: dict[str, str]  # camera name -> feature key
    features: dict
    tasks: dict[int, str] | None  # task_index -> text; None when meta/tasks.jsonl is missing
    licence: str
    notes: list[str] = field(default_factory=list)
    episodes: dict | None = None  # v3.0: episode_index -> v3.EpisodeV3 (where its rows and frames lie)


class Gm100Adapter(SourceAdapter):
    slug = SLUG
    name = "GM-100"
    layout = "task_XXXXX/ folders, each a LeRobot dataset (meta/info.json, data/chunk-*/, videos/chunk-*/)"
    unit_type = "episode"
    options = {
        "camera": "primary camera: the video feature without 'observation.images.' (default camera_top)",
        "frame_count_tolerance": "largest gap between the primary video's frames and the parquet's rows accepted "
        "(cut to the decodable common prefix, with a note); larger gaps are quarantined "
        "(default 2; 0 = strict)",
    }
    arm_layout = "bimanual"  # the Cobot Magic hardware; single/bimanual task typing is derived by the labels stage
    signal_semantics = {
        "pos_x/pos_y/pos_z": "observation.state.arm.position[0:3] (left) / [6:9] (right): joint angles 1-3, rad "
        "(docs/upstream-formats.md, GM-100)",
        "speed": "L2 norm of observation.state.arm.velocity[0:3] / [6:9]: joint speeds 1-3, rad/s",
        "speed_full": "L2 norm of observation.state.arm.velocity[0:6] / [6:12] (the phase rule's speed)",
        "gripper_effort": "observation.state.effector.effort[0] (left) / [1] (right); units unknown (driver current?)",
        "gripper_width": "observation.state.effector.position[0] (left) / [1] (right): gripper opening, m, 0..0.066",
        "force": "null (no F/T sensor)",
    }

    def __init__(self, camera: str = "camera_top", frame_count_tolerance: int = 2):
        if int(frame_count_tolerance) < 0:
            raise ValueError(f"frame_count_tolerance must be >= 0, not {frame_count_tolerance!r}")
        self.camera = camera[len(VIDEO_PREFIX) :] if camera.startswith(VIDEO_PREFIX) else camera
        self.frame_count_tolerance = int(frame_count_tolerance)
        super().__init__()

    def _init_state(self) -> None:
        self._meta_cache: dict[tuple, _TaskMeta] = {}
        self._root_licence: dict[tuple, str | None] = {}

    # ------------------------------------------------------------------ discovery
    def discover(self, root: Path) -> list[str]:
        root = require_root(root, self.slug)
        try:
            entries = sorted(os.listdir(root))
        except OSError as exc:
            raise SourceError(f"{self.slug}: root {root.name!r} cannot be listed ({exc.strerror})") from None
        if not entries:
            raise SourceError(f"{self.slug}: root {root.name!r} is empty")
        # task folders; a symlink (even a dangling one) is listed too so that read_unit can refuse it loudly
        tasks = [e for e in entries if TASK_RE.match(e) and ((root / e).is_dir() or (root / e).is_symlink())]
        if not tasks:
            if (root / "meta" / "info.json").is_file():
                raise SourceError(
                    f"{self.slug}: root {root.name!r} is a single LeRobot dataset (meta/info.json), not the GM-100 "
                    "repo folder; point the root at the folder that holds the task_XXXXX folders"
                )
            raise SourceError(f"{self.slug}: root {root.name!r} holds no task_XXXXX folders (not the GM-100 layout)")
        ids: list[str] = []
        for task in tasks:
            try:
                episodes, _ = self._list_episodes(root, task)
            except Exception:  # noqa: BLE001 - one unreadable task folder: its placeholder unit is quarantined
                episodes = []
            if episodes:
                ids.extend(f"{task}__episode_{e:06d}" for e in episodes)
            else:
                ids.append(f"{task}__{PLACEHOLDER}")
        return sorted(ids)

    def _list_episodes(self, root: Path, task: str) -> tuple[list[int], bool]:
        try:
            tdir = safe_join(root, task)
        except UnitError:
            return [], False
        info = _read_json_quiet(root, f"{task}/meta/info.json", self.input_limits)
        if _is_v3(tdir, info):
            try:
                return sorted(v3.read_episodes(root, task)), True
            except UnitError:  # listed from info.json, so that read_unit quarantines each with the reason
                total = info.get("total_episodes") if isinstance(info, dict) else None
                return (list(range(total)) if isinstance(total, int) and total > 0 else []), True
        episodes: set[int] = set()
        for row in _read_jsonl_quiet(root, f"{task}/meta/episodes.jsonl", self.input_limits):
            e = row.get("episode_index") if isinstance(row, dict) else None
            if isinstance(e, int) and e >= 0:
                episodes.add(e)
        tpl = info.get("data_path") if isinstance(info, dict) else None
        if not isinstance(tpl, str):
            tpl = DEFAULT_DATA_PATH
        episodes.update(_scan_template(tdir, tpl))
        return sorted(episodes), False

    # ------------------------------------------------------------------ one unit
    def read_unit(self, root: Path, unit_id: str) -> UnitIR:
        root = Path(root)
        task, ep = self._parse(root, unit_id)
        meta = self._task_meta(root, task)
        notes = list(meta.notes)
        key = self._video_key(meta, self.camera)

        data_rel = self._data_rel(meta, task, ep)
        data_path = safe_join(root, data_rel)
        if not data_path.is_file():
            raise UnitAbsent(f"episode parquet is missing ({data_rel.split('/', 1)[1]})", file=data_rel)
        if meta.episodes is None:
            table = _read_parquet(data_path, data_rel, PARQUET_COLUMNS)
        else:  # v3.0: this episode's rows of a multi-episode file
            table = v3.episode_rows(data_path, data_rel, ep, PARQUET_COLUMNS)
        n = table.num_rows
        if n == 0:
            raise UnitError("episode parquet has no rows", file=data_rel)

        for col in (COL_TS, COL_FRAME):
            if col not in table.column_names:
                raise UnitError(f"episode parquet has no {col!r} column", file=data_rel)
        fidx = table.column(COL_FRAME).to_numpy()
        if not np.array_equal(fidx, np.arange(n)):
            order = np.argsort(fidx, kind="stable")
            if not np.array_equal(fidx[order], np.arange(n)):
                raise UnitError(f"frame_index is not a permutation of 0..{n - 1}", file=data_rel)
            table = table.take(pa.array(order))
        ts = table.column(COL_TS).to_numpy(zero_copy_only=False).astype(np.float64)
        if not np.all(np.isfinite(ts)):
            raise UnitError("timestamp column has null/NaN values", file=data_rel)
        if np.any(np.diff(ts) < 0):
            raise UnitError("timestamp column is not monotone", file=data_rel)
        if COL_EPISODE in table.column_names:
            eps = np.unique(table.column(COL_EPISODE).to_numpy())
            if len(eps) != 1 or int(eps[0]) != ep:
                raise UnitError(f"episode_index column {eps[:3].tolist()} does not match episode {ep}", file=data_rel)

        # cameras present for this episode (video features of info.json whose file exists)
        cameras = []
        primary_rel = None
        for cam in sorted(meta.video_keys):
            rel_v = self._video_rel(meta, task, ep, cam)
            p = safe_join(root, rel_v)
            if p.is_file():
                cameras.append(cam)
            if cam == self.camera:
                primary_rel = rel_v
        if self.camera not in cameras:  # a partial download (parquet for every episode, videos for some)
            raise UnitAbsent(f"primary camera {self.camera!r} video is missing (not downloaded)", file=primary_rel)
        if missing := sorted(set(meta.video_keys) - set(cameras)):  # kept: the release uses the primary camera only
            notes.append(f"kept without camera(s) {', '.join(missing)}: video not downloaded (a partial download)")
        offset, span = self._video_span(meta, ep, self.camera)
        try:
            n_video = (
                video.count_frames(safe_join(root, primary_rel), max_samples=self.input_limits.max_video_samples)
                - offset
            )
        except video.DecodeError as exc:
            raise UnitError(f"{self.camera} video cannot be read: {exc}", file=primary_rel) from None
        if span is not None:
            n_video = min(n_video, span)
        if n_video <= 0:
            raise UnitError(f"{self.camera} video has no frames", file=primary_rel)

        if n_video != n:
            gap = n - n_video
            what = (
                f"{self.camera} video has {n_video} decodable frames but the parquet has {n} rows "
                f"({abs(gap)} frame{'s' if abs(gap) != 1 else ''} {'short' if gap > 0 else 'extra'})"
            )
            if abs(gap) <= self.frame_count_tolerance:
                keep = self._decodable(root, primary_rel, min(n, n_video), offset)
                note = f"{what}: cut to the first {keep} frames (tolerance {self.frame_count_tolerance})"
                if n > keep:
                    note += f", dropped {n - keep} trailing signal row{'s' if n - keep != 1 else ''}"
                notes.append(note)
                log.warning("%s %s: %s", self.slug, unit_id, note)
                table = table.slice(0, keep)
                ts = ts[:keep]
                n = keep
            else:
                raise UnitError(what, file=primary_rel)

        language = None
        if meta.tasks is not None:
            tix = None
            if COL_TASK in table.column_names:
                vals = np.unique(table.column(COL_TASK).to_numpy())
                tix = int(vals[0]) if len(vals) >= 1 else None
            elif len(meta.tasks) == 1:
                tix = next(iter(meta.tasks))
            language = meta.tasks.get(tix) if tix is not None else None

        unit = {
            "source": self.slug,
            "unit_id": unit_id,
            "unit_type": self.unit_type,
            "task_id": task,
            "operator_id": None,
            "scene_id": None,
            "config_id": None,
            "taxonomy": None,
            "official_split": None,
            "cameras": cameras,
            "camera": self.camera,
            "fps": float(self._camera_fps(meta, key)),
            "num_frames": int(n),
            "arm_layout": self.arm_layout,
            "licence": meta.licence,
            "rating": None,
            "language": language,
        }
        t_sec = ts - ts[0]
        frames = pa.Table.from_arrays(
            [
                pa.repeat(pa.scalar(self.slug, pa.string()), n),
                pa.repeat(pa.scalar(unit_id, pa.string()), n),
                pa.repeat(pa.scalar(self.camera, pa.string()), n),
                pa.array(np.arange(n, dtype=np.int64)),
                pa.array(t_sec),
                pa.array(ts),
            ],
            schema=FRAMES_SCHEMA,
        )
        signals = signals_table(self.slug, table, meta.features, unit_id, t_sec, data_rel, notes)
        ir = UnitIR(unit=unit, frames=frames, signals=signals, segments=empty(SEGMENTS_SCHEMA))
        ir.notes = notes  # type: ignore[attr-defined]  # (no notes field in the shared IR yet)
        return ir

    def _decodable(self, root: Path, rel_v: str, keep: int, offset: int = 0) -> int:
        """`keep`, lowered past trailing frames that do not decode (a video cut short mid-frame), so that no item
        can reference a frame that does not decode; UnitError when none of the last frames decode."""
        path = safe_join(root, rel_v)
        for last in range(keep - 1, max(-1, keep - 2 - self.frame_count_tolerance), -1):
            try:
                video.read_frames(path, [offset + last], max_samples=self.input_limits.max_video_samples)
                return last + 1
            except video.DecodeError:
                continue
        raise UnitError(f"{self.camera} video: the last frames do not decode", file=rel_v)

    # ------------------------------------------------------------------ frames
    def unit_files(self, root: Path, unit_id: str) -> list[tuple[str, Path, tuple | None]]:
        root = Path(root)
        task, ep = self._parse(root, unit_id)
        meta = self._task_meta(root, task)
        rels = [
            f"{task}/meta/info.json",
            f"{task}/{_fill(meta.data_path, ep, meta.chunks_size, file=f'{task}/meta/info.json')}",
        ]
        if meta.video_path is not None:
            rels += [self._video_rel(meta, task, ep, cam) for cam in sorted(meta.video_keys)]
        return [(r, safe_join(root, r), None) for r in rels]

    def read_frames(
        self, root: Path, unit_id: str, camera: str, indices: Sequence[int], decoder: str = "auto", threads: int = 1
    ) -> dict[int, np.ndarray]:
        root = Path(root)
        task, ep = self._parse(root, unit_id)
        meta = self._task_meta(root, task)
        cam = camera[len(VIDEO_PREFIX) :] if camera.startswith(VIDEO_PREFIX) else camera
        self._video_key(meta, cam)
        rel_v = self._video_rel(meta, task, ep, cam)
        path = safe_join(root, rel_v)
        if not path.is_file():
            raise UnitError(f"{cam} video is missing", file=rel_v)
        want = [int(i) for i in indices]
        if any(i < 0 for i in want):
            raise UnitError(f"negative frame index requested: {min(want)}", file=rel_v)
        if not want:
            return {}
        offset, span = self._video_span(meta, ep, cam)
        if span is not None and max(want) >= span:
            raise UnitError(
                f"{cam} frames {[i for i in want if i >= span][:5]} outside the episode ({span} frames)", file=rel_v
            )
        try:
            got = video.read_frames(
                path,
                [offset + i for i in want],
                decoder=decoder,
                threads=threads,
                max_samples=self.input_limits.max_video_samples,
            )
        except video.DecodeError as exc:
            raise UnitError(path_free(f"{cam} video: {exc}", path, rel_v), file=rel_v) from None
        return {i: got[offset + i] for i in want}

    # ------------------------------------------------------------------ helpers

    def _parse(self, root: Path, unit_id: str) -> tuple[str, int]:
        check_unit_id(unit_id)
        if unit_id.endswith(f"__{PLACEHOLDER}"):
            task = unit_id[: -len(PLACEHOLDER) - 2]
            if TASK_RE.match(task):
                safe_join(root, task)  # raises for a task folder escaping the root
                # the episodes it stands for, counted as lost: as many as the other task folders list (median)
                units = typical_units(
                    len(self._list_episodes(root, t)[0])
                    for t in sorted(os.listdir(root))
                    if TASK_RE.match(t) and t != task
                )
                try:
                    os.listdir(root / task)
                    why = (
                        "task folder has no meta/info.json and no episode files"
                        if not (root / task / "meta" / "info.json").is_file()
                        else "task folder lists no episodes (no "
                        "meta/episodes.jsonl entries and no episode parquet files)"
                    )
                except OSError as exc:
                    why = (
                        "task folder is missing"
                        if isinstance(exc, FileNotFoundError)
                        else f"task folder cannot be read: {type(exc).__name__}"
                    )
                raise UnitError(why, file=task, units=units)
        m = UNIT_RE.match(unit_id)
        if not m:
            raise UnitError(f"malformed GM-100 unit id {unit_id!r} (expected task_XXXXX__episode_XXXXXX)")
        return m.group(1), int(m.group(2))

    def _task_meta(self, root: Path, task: str) -> _TaskMeta:
        tdir = safe_join(root, task)
        tdir_s = str(tdir)  # the cache stamp from plain strings: this runs twice per unit (read_unit, fingerprint)
        if not os.path.isdir(tdir_s):
            raise UnitError("task folder is missing", file=task)
        stamp = (tdir_s, *(_stat(os.path.join(tdir_s, f)) for f in META_FILES), _stat(f"{root}/README.md"))
        hit = self._meta_cache.get(stamp)
        if hit is not None:
            return hit
        info_rel = f"{task}/meta/info.json"
        info_path = safe_join(root, info_rel)
        tasks_rel = f"{task}/meta/tasks.jsonl"
        tasks_path = safe_join(root, tasks_rel)
        if not info_path.is_file():
            raise UnitError("meta/info.json is missing: the task folder is not a LeRobot dataset", file=info_rel)
        try:
            info = load_json(
                read_metadata(root, info_rel, self.input_limits.max_metadata_bytes), info_rel, self.input_limits
            )
        except UnitError as exc:
            raise UnitError(f"meta/info.json is not readable: {exc.reason}", file=info_rel) from None
        if not isinstance(info, dict):
            raise UnitError("meta/info.json is not a JSON object", file=info_rel)
        fps, data_path, video_path, features, video_keys, chunks = parse_info(info, info_rel)
        tasks = None
        notes: list[str] = []
        episodes = v3.read_episodes(root, task) if _is_v3(tdir, info) else None
        if episodes is not None:
            tasks = v3.read_tasks(root, task)
            if tasks is None:
                notes.append("meta/tasks.parquet is missing or unreadable: language is null")
        elif tasks_path.is_file():
            tasks = {}
            for row in _read_jsonl_quiet(root, tasks_rel, self.input_limits):
                if (
                    isinstance(row, dict)
                    and isinstance(row.get("task_index"), int)
                    and isinstance(row.get("task"), str)
                ):
                    tasks[row["task_index"]] = row["task"]
        else:
            notes.append("meta/tasks.jsonl is missing: language is null")
        licence = _card_licence(root, f"{task}/README.md") or self._licence_of_root(root) or "unknown"
        meta = _TaskMeta(
            task=task,
            info=info,
            fps=float(fps),
            data_path=data_path,
            video_path=video_path if isinstance(video_path, str) and video_path else None,
            chunks_size=chunks,
            video_keys=video_keys,
            features=features,
            tasks=tasks,
            licence=licence,
            notes=notes,
            episodes=episodes,
        )
        if len(self._meta_cache) > 512:
            self._meta_cache.clear()
        self._meta_cache[stamp] = meta
        return meta

    def _licence_of_root(self, root: Path) -> str | None:
        card = Path(root) / "README.md"
        key = (str(root), _stat(card))
        if key not in self._root_licence:
            self._root_licence[key] = _card_licence(root, "README.md")
        return self._root_licence[key]

    def _video_key(self, meta: _TaskMeta, camera: str) -> str:
        if meta.video_path is None:
            raise UnitError("meta/info.json has no video_path template", file=f"{meta.task}/meta/info.json")
        if camera not in meta.video_keys:
            raise UnitError(
                f"camera {camera!r} is not a video feature of meta/info.json (have {sorted(meta.video_keys)})",
                file=f"{meta.task}/meta/info.json",
            )
        return meta.video_keys[camera]

    def _data_rel(self, meta: _TaskMeta, task: str, ep: int) -> str:
        info_rel = f"{task}/meta/info.json"
        if meta.episodes is None:
            return f"{task}/{_fill(meta.data_path, ep, meta.chunks_size, file=info_rel)}"
        loc = meta.episodes.get(ep)
        if loc is None:
            raise UnitError(f"episode {ep} is not in meta/episodes", file=f"{task}/meta/episodes")
        return f"{task}/{v3.fill(meta.data_path, *loc.data, where=info_rel)}"

    def _video_span(self, meta: _TaskMeta, ep: int, camera: str) -> tuple[int, int | None]:
        """(index of the episode's first frame in its video file, frames it spans there or None = to the end)."""
        if meta.episodes is None:
            return 0, None
        loc = meta.episodes[ep].videos.get(self._video_key(meta, camera))
        fps = self._camera_fps(meta, self._video_key(meta, camera))
        return (v3.frame_offset(loc[2], fps), v3.span_frames(loc[2], loc[3], fps)) if loc else (0, None)

    def _video_rel(self, meta: _TaskMeta, task: str, ep: int, camera: str) -> str:
        key = self._video_key(meta, camera)
        if meta.episodes is not None:
            loc = meta.episodes.get(ep)
            if loc is None or key not in loc.videos:
                return f"{task}/videos/{key}/episode_{ep:06d}.missing"  # not in the metadata: not downloaded
            return f"{task}/{v3.fill(meta.video_path, loc.videos[key][0], loc.videos[key][1], key, task)}"
        return f"{task}/{_fill(meta.video_path, ep, meta.chunks_size, video_key=key, file=f'{task}/meta/info.json')}"

    def _camera_fps(self, meta: _TaskMeta, key: str) -> float:
        info = meta.features.get(key, {}).get("info") or {}
        for k in ("video.fps", "video_fps"):
            v = info.get(k)
            if isinstance(v, (int, float)) and v > 0:
                return float(v)
        return meta.fps
