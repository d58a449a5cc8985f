"""LeRobot dataset storage v3.0: many episodes per data parquet and per video file, located by episode metadata.

Layout (LeRobot's documented v3.0 format; docs/upstream-formats.md, GM-100):

    meta/info.json                             codebase_version "v3.0", fps, features, chunks_size,
                                               data_path  "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
                                               video_path "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    meta/tasks.parquet                         task_index + the task text (as the index column `task` or a column)
    meta/episodes/chunk-*/file-*.parquet       one row per episode: episode_index, length, data/chunk_index,
                                               data/file_index, dataset_from_index, dataset_to_index and per camera
                                               videos/<key>/chunk_index, videos/<key>/file_index,
                                               videos/<key>/from_timestamp, videos/<key>/to_timestamp
    data/chunk-*/file-*.parquet                rows of many episodes (episode_index, frame_index, timestamp, ...)
    videos/<key>/chunk-*/file-*.mp4            many episodes back to back; an episode starts at from_timestamp

Frame i of an episode is frame round(from_timestamp * fps) + i of its video file, the frame LeRobot's reader returns
for timestamp from_timestamp + timestamp[i].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..base import safe_join
from ..ir import UnitError


@dataclass(frozen=True)
class EpisodeV3:
    """Where one episode lies: its data file and, per camera (video feature key), its video file and offset."""

    index: int
    length: int | None
    data: tuple[int, int]  # (chunk_index, file_index)
    videos: dict  # video key -> (chunk_index, file_index, from_timestamp, to_timestamp)


def is_v3(info) -> bool:
    return isinstance(info, dict) and str(info.get("codebase_version", "")).startswith("v3")


def read_episodes(root: Path, task: str) -> dict[int, EpisodeV3]:
    """episode_index -> EpisodeV3 from every meta/episodes/chunk-*/file-*.parquet (UnitError naming a bad file)."""
    base = safe_join(root, f"{task}/meta/episodes")
    out: dict[int, EpisodeV3] = {}
    for path in sorted(base.glob("chunk-*/file-*.parquet")):
        rel = f"{task}/meta/episodes/{path.parent.name}/{path.name}"
        try:
            rows = pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise UnitError(f"episode metadata cannot be read: {exc}", file=rel) from None
        for r in rows:
            try:
                ep = int(r["episode_index"])
                data = (int(r["data/chunk_index"]), int(r["data/file_index"]))
            except (KeyError, TypeError, ValueError):
                raise UnitError(
                    "episode metadata lacks episode_index or data/chunk_index, data/file_index", file=rel
                ) from None
            videos = {}
            for k in r:
                if k.startswith("videos/") and k.endswith("/chunk_index"):
                    key = k[len("videos/") : -len("/chunk_index")]
                    try:
                        videos[key] = (
                            int(r[k]),
                            int(r[f"videos/{key}/file_index"]),
                            float(r[f"videos/{key}/from_timestamp"]),
                            float(r[f"videos/{key}/to_timestamp"]),
                        )
                    except (KeyError, TypeError, ValueError):
                        continue  # this camera's location is incomplete: treated as not present
            length = r.get("length")
            out[ep] = EpisodeV3(ep, int(length) if isinstance(length, int) else None, data, videos)
    return out


def read_tasks(root: Path, task: str) -> dict[int, str] | None:
    """task_index -> text from meta/tasks.parquet (None when it is missing or unreadable)."""
    path = safe_join(root, f"{task}/meta/tasks.parquet")
    if not path.is_file():
        return None
    try:
        t = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError):
        return None
    names = t.column_names
    text_col = "task" if "task" in names else ("__index_level_0__" if "__index_level_0__" in names else None)
    if "task_index" not in names or text_col is None:
        return None
    return {int(i): str(s) for i, s in zip(t.column("task_index").to_pylist(), t.column(text_col).to_pylist())}


def fill(template: str, chunk: int, file: int, video_key: str | None = None, where: str | None = None) -> str:
    try:
        return template.format_map(
            {"chunk_index": chunk, "file_index": file, **({"video_key": video_key} if video_key else {})}
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise UnitError(f"unsupported v3.0 path template {template!r} ({exc})", file=where) from None


def episode_rows(path: Path, rel: str, episode: int, columns) -> pa.Table:
    """The rows of one episode in a multi-episode data parquet."""
    try:
        pf = pq.ParquetFile(path)  # one open for schema and data (as storage/lerobot.py read_parquet)
        names = pf.schema_arrow.names
        if "episode_index" not in names:
            raise UnitError("v3.0 data parquet has no episode_index column", file=rel)
        t = pf.read(
            columns=[c for c in columns if c in names] + (["episode_index"] if "episode_index" not in columns else []),
            use_threads=False,
        )
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UnitError(f"data parquet cannot be read: {exc}", file=rel) from None
    return t.filter(pc.equal(t.column("episode_index"), episode))


def frame_offset(from_timestamp: float, fps: float) -> int:
    """Index in the video file of the episode's first frame."""
    return int(math.floor(from_timestamp * fps + 0.5))


def span_frames(from_timestamp: float, to_timestamp: float, fps: float) -> int:
    """Frames the episode's metadata gives it in the video file."""
    return int(math.floor((to_timestamp - from_timestamp) * fps + 0.5))
