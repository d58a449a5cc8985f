"""Rewrite a sample GM-100 task folder (LeRobot v2.1) into the LeRobot v3.0 layout, as LeRobot's converter lays
datasets out: all episodes of the task in one data parquet and, per camera, one mp4 (episodes back to back), located
by meta/episodes/chunk-000/file-000.parquet; tasks in meta/tasks.parquet (docs/upstream-formats.md, GM-100)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from upstream_adapters.media import video

from .common import encode_video

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def convert_task(task_dir: Path) -> None:
    task_dir = Path(task_dir)
    meta = task_dir / "meta"
    info = json.loads((meta / "info.json").read_text(encoding="utf-8"))
    fps = float(info["fps"])
    episodes = sorted(int(p.stem.split("_")[1]) for p in task_dir.glob("data/chunk-*/episode_*.parquet"))
    keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    rows = {e: {"episode_index": e, "data/chunk_index": 0, "data/file_index": 0} for e in episodes}
    tables, start = [], 0
    for e in episodes:
        t = pq.read_table(next(task_dir.glob(f"data/chunk-*/episode_{e:06d}.parquet")))
        t = t.append_column("index", pa.array(range(start, start + t.num_rows), pa.int64())) \
            if "index" not in t.column_names else t
        rows[e].update({"length": t.num_rows, "dataset_from_index": start, "dataset_to_index": start + t.num_rows})
        tables.append(t)
        start += t.num_rows
    shutil.rmtree(task_dir / "data")
    out = task_dir / DATA_PATH.format(chunk_index=0, file_index=0)
    out.parent.mkdir(parents=True)
    pq.write_table(pa.concat_tables(tables, promote_options="default"), out)
    for key in keys:
        frames, t0 = [], 0
        for e in episodes:
            src = next(iter(task_dir.glob(f"videos/chunk-*/{key}/episode_{e:06d}.mp4")), None)
            got = []
            if src is not None:
                n = video.count_frames(src)
                decoded = video.read_frames(src, list(range(n)))
                got = [decoded[i] for i in range(n)]
            rows[e].update({f"videos/{key}/chunk_index": 0, f"videos/{key}/file_index": 0,
                            f"videos/{key}/from_timestamp": t0 / fps,
                            f"videos/{key}/to_timestamp": (t0 + len(got)) / fps})
            frames += got
            t0 += len(got)
        path = task_dir / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True)
        encode_video(frames, fps, codec="h264", gop=60, path=path)
    shutil.rmtree(task_dir / "videos" / "chunk-000", ignore_errors=True)
    (meta / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([rows[e] for e in episodes]), meta / "episodes" / "chunk-000" / "file-000.parquet")
    if (meta / "tasks.jsonl").is_file():
        tasks = [json.loads(line) for line in (meta / "tasks.jsonl").read_text(encoding="utf-8").splitlines() if line]
        pq.write_table(pa.table({"task_index": pa.array([t["task_index"] for t in tasks], pa.int64()),
                                 "task": pa.array([t["task"] for t in tasks])}), meta / "tasks.parquet")
    for old in ("tasks.jsonl", "episodes.jsonl", "episodes_stats.jsonl"):
        (meta / old).unlink(missing_ok=True)
    info.update(codebase_version="v3.0", data_path=DATA_PATH, video_path=VIDEO_PATH)
    (meta / "info.json").write_text(json.dumps(info, indent=4) + "\n", encoding="utf-8")
