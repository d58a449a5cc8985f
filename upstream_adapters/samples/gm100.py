"""Sample corpus for GM-100 in the real `rhos-ai/gm100-cobotmagic-lerobot` layout (docs/upstream-formats.md, GM-100).

`write(out_dir, scale, seed)` writes the HF repo folder: `README.md` (a dataset card WITHOUT a licence, because the
real licence is unverified), `.gitattributes`, and one standalone LeRobot v2.1 dataset per `task_XXXXX/`:
`meta/info.json`, `meta/episodes.jsonl`, `meta/episodes_stats.jsonl`, `meta/tasks.jsonl` (missing for one demo task),
`data/chunk-000/episode_XXXXXX.parquet` (signal columns as fixed-length list<float32>, HF `datasets` schema metadata)
and `videos/chunk-000/observation.images.<camera>/episode_XXXXXX.mp4` (H.264 long GOP with B-frames; one AV1 episode).

Scales:
- `tiny`  (tests): task_00001 single_right at 15 fps (episode 1's camera_top is AV1) and task_00002
  bimanual_sequential without tasks.jsonl (episode 1's camera_top is one frame shorter than its parquet); 2 episodes
  each of 72-80 frames, 96x72.
- `demo`: 4 tasks (task_00002 bimanual_sync, task_00003 single_left without tasks.jsonl, task_00008 single_right,
  task_00014 bimanual_sequential) x 3-4 episodes of 200-300 frames at 30 fps, 96x72, all three cameras. Odd cases
  included: task_00002 episode 1 camera_top is AV1 (libsvtav1, g=2 as LeRobot writes; decord cannot open it);
  task_00014 episode 2 camera_top is one frame shorter than its parquet; task_00003 has no meta/tasks.jsonl.
- `release`: 4,186 episodes over 106 tasks (task_00001..task_00110 minus 00004, 00005, 00052, 00059), 39-40 episodes
  per task, 150-200 frames each, 64x48. To stay within ~5 min on one core, the wrist cameras are written only for
  episode 0 of each task (info.json still declares all three video features, as the real data does); the camera_top
  of episode 0 of every 25th task is AV1. No short videos in release (so all 4,186 units ingest).

Signals (per active arm, timings varied per episode by the RNG): idle -> approach (vertical image move, descend) ->
grasp (gripper closes, effort drops well below baseline) -> carry (horizontal move while holding, lift) -> place (slow
descent) -> release (gripper opens, effort back to baseline) -> retreat (vertical back) -> return (horizontal back) ->
idle. The first and last >= 12 % of every episode are idle for both arms (baseline / noise estimation). Per task type:
single_left/right (other arm idle), bimanual_sequential (first arm, short overlap, second arm: left-only, both,
right-only stretches), bimanual_sync (both arms run the same motion, the second 0.07-0.2 s late).

Image mapping of this synthetic corpus: the one the reference build fitted for camera_top (build_t3_gt, and
configs/labels.yaml `direction.gm100`): arm position +x moves the arm's marker LEFT in the image and +y moves it DOWN,
`IMAGE_GAIN` image-widths per position unit, for both arms; the left arm's marker is yellow around x=0.3, the right
arm's cyan around x=0.7. Wrist cameras show their own arm's marker (same mapping, half gain).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .common import encode_video, render_frame, rng_for, scaled
from .gm100_signals import (  # noqa: F401 - the generator's public names stay importable from here
    HOME,
    episode_signals,
)

CAMERAS = ("camera_top", "camera_wrist_left", "camera_wrist_right")
VIDEO_PREFIX = "observation.images."
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
CHUNKS_SIZE = 1000
CODEBASE_VERSION = "v2.1"
ROBOT_TYPE = "cobot_magic"  # [I] the real value in info.json is unverified
MARKER_FILE = ".processbench_sample"
GOP = 60  # H.264 keyframe interval (2 s at 30 fps), B-frames on
RELEASE_GAPS = (4, 5, 52, 59)
RELEASE_TYPE_COUNTS = {"bimanual_sequential": 46, "bimanual_sync": 21, "single_left": 10, "single_right": 29}
TASK_TYPES = tuple(RELEASE_TYPE_COUNTS)

IMAGE_CENTRE = {"left": (0.3, 0.55), "right": (0.7, 0.55)}
IMAGE_GAIN = 0.35
RIGHT_MARKER_RGB = (40, 220, 250)
GRIPPER_MAX = 0.08

_ARM_NAMES = [f"{side}_arm_{i}" for side in ("left", "right") for i in range(6)]
_GRIPPER_NAMES = ["left_gripper", "right_gripper"]
# (column, width, names) in the order LeRobot lists them in info.json (robot features first).
SIGNAL_FEATURES = (
    ("observation.state.effector.effort", 2, _GRIPPER_NAMES),
    ("observation.state.arm.velocity", 12, _ARM_NAMES),
    ("observation.state.arm.position", 12, _ARM_NAMES),
    ("action.arm.position", 12, _ARM_NAMES),
    ("observation.state.effector.position", 2, _GRIPPER_NAMES),
    ("observation.state.arm.effort", 12, _ARM_NAMES),
    ("action.effector.position", 2, _GRIPPER_NAMES),
)
DEFAULT_FEATURES = (
    ("timestamp", "float32"),
    ("frame_index", "int64"),
    ("episode_index", "int64"),
    ("index", "int64"),
    ("task_index", "int64"),
)

# (leg, share of the active window)

_VERBS = {
    "bimanual_sync": ["lift-the", "fold-the", "carry-the", "stretch-the", "open-the"],
    "bimanual_sequential": ["hand-over-the", "pour-from-the", "unscrew-the", "insert-the", "stack-the"],
    "single_left": ["push-the", "pick-up-the", "slide-the", "press-the"],
    "single_right": ["pick-up-the", "place-the", "wipe-with-the", "squeeze-the", "turn-the"],
}
_OBJECTS = ["cup", "towel", "box", "bottle", "sponge", "toy-chicken", "lid", "block", "marker", "bowl", "tray", "cloth"]
_TARGETS = ["onto-the-plate", "into-the-basket", "to-the-left-side", "next-to-the-bowl", "on-the-shelf",
            "into-the-drawer", "over-the-box", "beside-the-cup"]


@dataclass
class EpisodeSpec:
    index: int
    n_frames: int
    top_codec: str = "h264"
    top_drop: int = 0  # camera_top written with this many fewer frames than the parquet
    wrist: bool = True


@dataclass
class TaskSpec:
    task_id: str
    task_type: str
    text: str
    episodes: list[EpisodeSpec] = field(default_factory=list)
    tasks_jsonl: bool = True  # False: meta/tasks.jsonl is missing (as for four tasks of a real download)
    fps: int = 30
    width: int = 96
    height: int = 72


# ---------------------------------------------------------------------------- plan


def _task_text(seed: int, task_id: str, task_type: str) -> str:
    rng = rng_for(seed, "gm100", "text", task_id)
    verb = _VERBS[task_type][int(rng.integers(len(_VERBS[task_type])))]
    obj = _OBJECTS[int(rng.integers(len(_OBJECTS)))]
    tgt = _TARGETS[int(rng.integers(len(_TARGETS)))]
    return f"{verb}-{obj}-{tgt}"


def plan(scale: str = "demo", seed: int = 0, units_factor: int | float = 1) -> list[TaskSpec]:
    """The corpus as a list of task specs (deterministic from seed); `units_factor` K: K times the release scale's
    episodes per task (an integer >= 1 or a fraction in (0, 1], rounded half up; the build's cost curve,
    bench/bench_cost_curve.py)."""
    if units_factor != 1 and scale != "release":
        raise ValueError(f"units_factor {units_factor} applies to the release scale only, not {scale!r}")
    if scale == "tiny":
        rng = rng_for(seed, "gm100", "tiny")
        return [
            TaskSpec("task_00001", "single_right", _task_text(seed, "task_00001", "single_right"),
                     [EpisodeSpec(0, int(rng.integers(72, 81))), EpisodeSpec(1, int(rng.integers(72, 81)), "av1")],
                     fps=15),
            TaskSpec("task_00002", "bimanual_sequential", _task_text(seed, "task_00002", "bimanual_sequential"),
                     [EpisodeSpec(0, int(rng.integers(72, 81))), EpisodeSpec(1, int(rng.integers(72, 81)), top_drop=1)],
                     tasks_jsonl=False),
        ]
    if scale == "demo":
        rng = rng_for(seed, "gm100", "demo")
        layout = [("task_00002", "bimanual_sync", 4, True), ("task_00003", "single_left", 3, False),
                  ("task_00008", "single_right", 3, True), ("task_00014", "bimanual_sequential", 4, True)]
        tasks = []
        for task_id, ttype, n_eps, has_text in layout:
            eps = [EpisodeSpec(e, int(rng.integers(200, 301))) for e in range(n_eps)]
            tasks.append(TaskSpec(task_id, ttype, _task_text(seed, task_id, ttype), eps, tasks_jsonl=has_text))
        tasks[0].episodes[1].top_codec = "av1"
        tasks[3].episodes[2].top_drop = 1
        return tasks
    if scale == "release":
        rng = rng_for(seed, "gm100", "release")
        ids = [f"task_{i:05d}" for i in range(1, 111) if i not in RELEASE_GAPS]
        types = [t for t, c in RELEASE_TYPE_COUNTS.items() for _ in range(c)]
        types = [types[i] for i in rng.permutation(len(types))]
        forty = set(rng.choice(len(ids), size=4186 - 39 * len(ids), replace=False).tolist())
        tasks = []
        for k, (task_id, ttype) in enumerate(zip(ids, types)):
            n_eps = scaled(40 if k in forty else 39, units_factor, "gm100", "episode per task")
            eps = [EpisodeSpec(e, int(rng.integers(150, 201)), wrist=(e == 0)) for e in range(n_eps)]
            if k % 25 == 0:
                eps[0].top_codec = "av1"
            tasks.append(TaskSpec(task_id, ttype, _task_text(seed, task_id, ttype), eps, width=64, height=48))
        return tasks
    raise ValueError(f"unknown scale {scale!r} (tiny, demo, release)")


# ---------------------------------------------------------------------------- frames


def _image_xy(arm: str, xy: np.ndarray, centre=None, gain: float = IMAGE_GAIN) -> tuple[float, float]:
    cx, cy = centre if centre is not None else IMAGE_CENTRE[arm]
    # the reference build's camera_top mapping (configs/labels.yaml direction.gm100): +x -> image left, +y -> down
    return (cx - gain * float(xy[0] - HOME[arm][0]), cy + gain * float(xy[1] - HOME[arm][1]))


def _paint_marker(img: np.ndarray, xy: tuple[float, float], gripper_open: float, rgb) -> None:
    """A second marker drawn with render_frame's geometry (render_frame draws one marker only)."""
    height, width = img.shape[:2]
    band = max(4, height // 8)
    r = max(2, min(width, height) // 10)
    cx = int(min(1.0, max(0.0, xy[0])) * (width - 2 * r)) + r
    cy = int(min(1.0, max(0.0, xy[1])) * (height - band - 2 * r)) + band + r
    img[cy - r:cy + r, cx - r:cx + r] = rgb
    jaw = int(r * min(1.0, max(0.0, gripper_open)))
    img[cy - r:cy + r, max(0, cx - r - jaw):max(0, cx - r - jaw) + 2] = (20, 20, 20)
    img[cy - r:cy + r, min(width - 2, cx + r + jaw):min(width - 2, cx + r + jaw) + 2] = (20, 20, 20)


def _frames(camera: str, pos: np.ndarray, grip: np.ndarray, n: int, width: int, height: int, hue: int):
    opening = np.clip(grip / GRIPPER_MAX, 0, 1)
    for i in range(n):
        if camera == "camera_top":
            img = render_frame(i, width, height, _image_xy("left", pos[i, 0:2]), float(opening[i, 0]), hue)
            _paint_marker(img, _image_xy("right", pos[i, 6:8]), float(opening[i, 1]), RIGHT_MARKER_RGB)
        else:
            arm, off, col = ("left", 0, 0) if camera == "camera_wrist_left" else ("right", 6, 1)
            xy = _image_xy(arm, pos[i, off:off + 2], centre=(0.5, 0.55), gain=IMAGE_GAIN / 2)
            img = render_frame(i, width, height, xy, float(opening[i, col]), (hue + 70 + 40 * col) % 256)
        yield img


# ---------------------------------------------------------------------------- writing


def _info(task: TaskSpec, episodes_written: int, frames_total: int, videos_total: int) -> dict:
    features: dict = {}
    for name, width, names in SIGNAL_FEATURES:
        features[name] = {"dtype": "float32", "shape": [width], "names": list(names)}
    for cam in CAMERAS:
        features[VIDEO_PREFIX + cam] = {
            "dtype": "video",
            "shape": [task.height, task.width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.fps": float(task.fps),
                "video.height": task.height,
                "video.width": task.width,
                "video.channels": 3,
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "has_audio": False,
            },
        }
    for name, dtype in DEFAULT_FEATURES:
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": ROBOT_TYPE,
        "total_episodes": episodes_written,
        "total_frames": frames_total,
        "total_tasks": 1,
        "total_videos": videos_total,
        "total_chunks": 1,
        "chunks_size": CHUNKS_SIZE,
        "fps": task.fps,
        "splits": {"train": f"0:{episodes_written}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": features,
    }


def _hf_metadata() -> bytes:
    feats = {}
    for name, width, _ in SIGNAL_FEATURES:
        feats[name] = {"feature": {"dtype": "float32", "_type": "Value"}, "length": width, "_type": "Sequence"}
    for name, dtype in DEFAULT_FEATURES:
        feats[name] = {"dtype": dtype, "_type": "Value"}
    return json.dumps({"info": {"features": feats}}, separators=(",", ":")).encode()


def _stats(values: np.ndarray) -> dict:
    v = values.reshape(len(values), -1).astype(np.float64)
    return {
        "min": [float(x) for x in v.min(axis=0)],
        "max": [float(x) for x in v.max(axis=0)],
        "mean": [float(x) for x in v.mean(axis=0)],
        "std": [float(x) for x in v.std(axis=0)],
        "count": [int(len(v))],
    }


def _write_task(root: Path, task: TaskSpec, seed: int) -> None:
    tdir = root / task.task_id
    (tdir / "meta").mkdir(parents=True, exist_ok=True)
    hf_meta = _hf_metadata()
    episodes_lines, stats_lines = [], []
    frames_total = 0
    videos_total = 0
    hue = int(rng_for(seed, "gm100", "hue", task.task_id).integers(0, 60))
    for ep in task.episodes:
        n = ep.n_frames
        sig = episode_signals(seed, task.task_id, task.task_type, ep.index, n, task.fps)
        chunk = ep.index // CHUNKS_SIZE
        index0 = frames_total
        cols: dict[str, pa.Array] = {}
        for name, width, _ in SIGNAL_FEATURES:
            cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(sig[name].ravel(), pa.float32()), width)
        default_values = {
            "timestamp": (np.arange(n) / task.fps).astype(np.float32),
            "frame_index": np.arange(n, dtype=np.int64),
            "episode_index": np.full(n, ep.index, dtype=np.int64),
            "index": np.arange(index0, index0 + n, dtype=np.int64),
            "task_index": np.zeros(n, dtype=np.int64),
        }
        for name, _ in DEFAULT_FEATURES:
            cols[name] = pa.array(default_values[name])
        table = pa.table(cols).replace_schema_metadata({b"huggingface": hf_meta})
        data_file = tdir / DATA_PATH.format(episode_chunk=chunk, episode_index=ep.index)
        data_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, data_file)
        frames_total += n

        pos = sig["observation.state.arm.position"]
        grip = sig["_gripper_clean"]
        for cam in CAMERAS:
            if cam != "camera_top" and not ep.wrist:
                continue
            count = n - ep.top_drop if cam == "camera_top" else n
            codec = ep.top_codec if cam == "camera_top" else "h264"
            if codec == "av1":
                os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner on stderr otherwise
            path = tdir / VIDEO_PATH.format(episode_chunk=chunk, video_key=VIDEO_PREFIX + cam, episode_index=ep.index)
            encode_video(_frames(cam, pos, grip, count, task.width, task.height, hue), task.fps, codec=codec,
                         gop=2 if codec == "av1" else GOP, path=path)
            videos_total += 1

        episodes_lines.append({"episode_index": ep.index, "tasks": [task.text],
                               "length": n})
        stats = {name: _stats(sig[name]) for name, _, _ in SIGNAL_FEATURES}
        stats.update({name: _stats(default_values[name]) for name, _ in DEFAULT_FEATURES})
        stats_lines.append({"episode_index": ep.index, "stats": stats})

    info = _info(task, len(task.episodes), frames_total, videos_total)
    (tdir / "meta" / "info.json").write_text(json.dumps(info, indent=4) + "\n", encoding="utf-8")
    (tdir / "meta" / "episodes.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in episodes_lines), encoding="utf-8")
    (tdir / "meta" / "episodes_stats.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in stats_lines), encoding="utf-8")
    if task.tasks_jsonl:
        (tdir / "meta" / "tasks.jsonl").write_text(
            json.dumps({"task_index": 0, "task": task.text}) + "\n", encoding="utf-8")


CARD = """---
task_categories:
- robotics
tags:
- LeRobot
- GM-100
- synthetic-sample
---

# gm100-cobotmagic-lerobot (ProcessBench synthetic sample)

Synthetic stand-in for the Hugging Face dataset `rhos-ai/gm100-cobotmagic-lerobot`, written by
`upstream_adapters/samples/gm100.py` in the same layout: one LeRobot v2.1 dataset per `task_XXXXX/` folder.
No licence is stated here because the licence of the real dataset is unverified.
"""


def release_units(seed: int = 0, units_factor: int | float = 1) -> int:
    """Episodes the release scale's plan holds with units factor K (a ValueError when K leaves a task none)."""
    return sum(len(t.episodes) for t in plan("release", seed, units_factor))


def write(out_dir: Path, scale: str = "demo", seed: int = 0, codebase_version: str = "v2.1",
          units_factor: int | float = 1) -> None:
    """Write the GM-100 sample corpus (the source root) into `out_dir`, replacing an earlier sample corpus there.
    codebase_version "v3.0" lays every task folder out as LeRobot v3.0 (`gm100_v3.convert_task`).

    Refuses to touch a non-empty `out_dir` that is not a sample corpus written by this module.
    """
    out_dir = Path(out_dir)
    tasks = plan(scale, seed, units_factor)
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / MARKER_FILE).is_file():
        raise FileExistsError(f"{out_dir.name!r} is not empty and not a gm100 sample corpus; refusing to overwrite")
    tmp = out_dir.with_name(out_dir.name + ".tmp-gm100-sample")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / "README.md").write_text(CARD, encoding="utf-8")
    (tmp / ".gitattributes").write_text("*.mp4 filter=lfs diff=lfs merge=lfs -text\n"
                                        "*.parquet filter=lfs diff=lfs merge=lfs -text\n", encoding="utf-8")
    if codebase_version not in ("v2.1", "v3.0"):
        raise ValueError(f"codebase_version must be 'v2.1' or 'v3.0', not {codebase_version!r}")
    for task in tasks:
        _write_task(tmp, task, seed)
        if codebase_version == "v3.0":
            from .gm100_v3 import convert_task

            convert_task(tmp / task.task_id)
    (tmp / MARKER_FILE).write_text(f"gm100 sample corpus, scale={scale}, seed={seed}\n", encoding="utf-8")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)


# ---------------------------------------------------------------------------- odd-case helpers (tests)


def unit_paths(root: Path, unit_id: str, camera: str = "camera_top") -> tuple[Path, Path]:
    """(parquet, video) paths of a unit of a corpus written by this module."""
    task, ep = unit_id.split("__episode_")
    e = int(ep)
    tdir = Path(root) / task
    data = tdir / DATA_PATH.format(episode_chunk=e // CHUNKS_SIZE, episode_index=e)
    vid = tdir / VIDEO_PATH.format(episode_chunk=e // CHUNKS_SIZE, video_key=VIDEO_PREFIX + camera, episode_index=e)
    return data, vid


def corrupt_video(root: Path, unit_id: str, camera: str = "camera_top", keep: float = 0.5) -> Path:
    """Truncate a unit's mp4 to `keep` of its bytes (an interrupted download); keep=0 leaves an empty file."""
    _, vid = unit_paths(root, unit_id, camera)
    data = vid.read_bytes()
    vid.write_bytes(data[: int(len(data) * keep)])
    return vid


def remove_info_json(root: Path, task_id: str) -> None:
    (Path(root) / task_id / "meta" / "info.json").unlink()
