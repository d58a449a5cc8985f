"""Decode exactly the frames the items reference, once, into the content-addressed cache.

    table = extract_frames(requests, open_reader, cache, workers=0, progress=True)

`requests`: one row per (source, unit_id, camera, frame_index) wanted (duplicates are fine). Work is grouped per
video (source, unit, camera), indices sorted, one open per video, and spread over a process pool (one worker per
core by default) with a bounded number of videos in flight, so the parent's memory does not grow with the number of
videos and pixels never travel between processes (workers write into the cache, return small rows). Frames already
in the cache are not decoded again (`cache.counters["decoded"]` counts what was). Cache keys carry each unit's
upstream fingerprint (`FrameKeys`, computed once per video per call), and every hit is checked (the entry's key,
its pixels against the recorded hash) before it is used; a bad entry is decoded again (cache.py).

The returned frame table has one row per distinct requested frame, sorted, with FRAME_TABLE_SCHEMA: status ok|error,
reason, pixel_sha256, height, width, mean, std, thumb (grey thumbnail, hex) — what the visual gate reads. A frame
that decoded but could not be written into the cache is not an error row: `extract_frames` raises CacheWriteError
(worker.py), a build error, so that the gate never drops its items as unreadable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing import Callable

import polars as pl

from .cache import FrameCache
from pipeline.core.pool import resolve_workers, run_tasks
from .readers import AdapterReaders, DirectoryReaders, reader_id, unit_fingerprint  # noqa: F401 - re-exported
from .worker import VideoTask, error_result, raise_cache_errors, run_video

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

FRAME_TABLE_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "camera": pl.String,
    "frame_index": pl.Int64,
    "cache_key": pl.String,
    "status": pl.String,
    "reason": pl.String,
    "pixel_sha256": pl.String,
    "height": pl.Int64,
    "width": pl.Int64,
    "mean": pl.Float64,
    "std": pl.Float64,
    "thumb": pl.String,
}
VIDEO_KEY = ["source", "unit_id", "camera"]


def requests_from_items(items: pl.DataFrame) -> pl.DataFrame:
    """The frame requests of an item table (source, unit_id, camera, frame_indices list) -> one row per frame."""
    return (
        items.select(*VIDEO_KEY, pl.col("frame_indices").alias("frame_index"))
        .explode("frame_index")
        .drop_nulls("frame_index")
        .with_columns(pl.col("frame_index").cast(pl.Int64))
        .unique()
        .sort([*VIDEO_KEY, "frame_index"])
    )


class FrameKeys:
    """Frame-cache keys through a reader factory: keys(source, unit_id, camera, index) -> key. Each video's upstream
    fingerprint is computed once per FrameKeys object (so once per extraction call); when it cannot be computed
    (the unit's files cannot be listed) the call raises ValueError naming the unit and the reason."""

    def __init__(self, cache: FrameCache, open_reader):
        self.cache, self.open_reader = cache, open_reader
        self._rid: dict[str, str] = {}
        self._fp: dict[tuple[str, str, str], str | Exception] = {}

    def fingerprint(self, source: str, unit_id: str, camera: str) -> str:
        video = (source, unit_id, camera)
        if video not in self._fp:
            try:
                self._fp[video] = unit_fingerprint(self.open_reader, source, unit_id, camera)
            except Exception as exc:  # noqa: BLE001 - reported per frame, never raised past the caller
                where = f" ({exc.file})" if getattr(exc, "file", None) else ""
                self._fp[video] = ValueError(
                    f"cannot fingerprint the upstream files of {source}/{unit_id}{where}: {type(exc).__name__}: {exc}"
                )
        fp = self._fp[video]
        if isinstance(fp, Exception):
            raise fp
        return fp

    def __call__(self, source: str, unit_id: str, camera: str, frame_index: int) -> str:
        return self.video(source, unit_id, camera, [frame_index])[0]

    def video(self, source: str, unit_id: str, camera: str, frame_indices) -> list[str]:
        """The keys of several frames of one video."""
        rid = self._rid.setdefault(source, reader_id(self.open_reader, source))
        return self.cache.video_keys(
            source, unit_id, camera, frame_indices, rid, self.fingerprint(source, unit_id, camera)
        )


def _row(source, unit_id, camera, i, key, status, reason, meta) -> dict:
    return {
        "source": source,
        "unit_id": unit_id,
        "camera": camera,
        "frame_index": int(i),
        "cache_key": key,
        "status": status,
        "reason": reason,
        **{k: (meta or {}).get(k) for k in ("pixel_sha256", "height", "width", "mean", "std", "thumb")},
    }


def _plan(
    requests: pl.DataFrame, open_reader, cache: FrameCache, rows: list[dict], threads: int = 1
) -> list[VideoTask]:
    """Look every requested frame up in the cache: checked hits become rows now, misses and bad entries become one
    task per video; a video whose upstream cannot be fingerprinted gets error rows."""
    req = (
        requests.select(*VIDEO_KEY, pl.col("frame_index").cast(pl.Int64))
        .unique()
        .group_by(VIDEO_KEY)
        .agg(pl.col("frame_index").sort())
        .sort(VIDEO_KEY)
    )
    keys = FrameKeys(cache, open_reader)
    videos = []
    for source, unit_id, camera, indices in req.iter_rows():
        try:
            videos.append(
                (source, unit_id, camera, list(zip(map(int, indices), keys.video(source, unit_id, camera, indices))))
            )
        except ValueError as exc:
            rows.extend(_row(source, unit_id, camera, i, None, "error", str(exc), None) for i in indices)
            cache.counters["errors"] += len(indices)
    metas = iter(cache.lookup_many([k for *_, frames in videos for _, k in frames], threads=threads))
    tasks = []
    for source, unit_id, camera, frames in videos:
        missing = []
        for i, key in frames:
            meta = next(metas)
            if meta is None:
                missing.append((i, key))
            else:
                cache.counters["hits"] += 1
                rows.append(_row(source, unit_id, camera, i, key, "ok", None, meta))
        if missing:
            tasks.append(VideoTask(open_reader, source, unit_id, camera, tuple(missing), cache))
    return tasks


def _progress(progress, total: int) -> Callable[[int], None]:
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="frames", unit="video")
        return lambda n: (bar.update(n), bar.close() if bar.n >= total else None)
    if callable(progress):
        state = {"done": 0}

        def step(n: int) -> None:
            state["done"] += n
            progress(state["done"], total)

        return step
    return lambda n: None


def extract_frames(
    requests: pl.DataFrame,
    open_reader,
    cache: FrameCache,
    workers: int | None = None,
    progress=None,
    mp_context: str | None = "forkserver",
    in_flight_per_worker: int = 2,
) -> pl.DataFrame:
    """Decode every requested frame not yet in `cache`; return the frame table (FRAME_TABLE_SCHEMA), sorted.

    open_reader: picklable factory source -> reader(unit_id, camera, indices) -> {index: RGB uint8}
    (AdapterReaders for the build). workers: pool size (None/0 = cores; 1 = in this process, no pool).
    progress: True (tqdm), a callable(done_videos, total_videos), or None.
    """
    rows: list[dict] = []
    tasks = _plan(requests, open_reader, cache, rows, threads=resolve_workers(workers))
    step = _progress(progress, len(tasks))

    def on_result(res: dict) -> None:
        rows.extend(res["rows"])
        cache.counters["decoded"] += res["decoded"]
        cache.counters["errors"] += res["errors"]
        cache.counters["worker_peak_rss_mb"] = max(cache.counters["worker_peak_rss_mb"], res.get("rss_mb", 0.0))
        step(1)

    run_tasks(
        run_video,
        tasks,
        workers,
        on_result,
        error_result,
        mp_context=mp_context,
        in_flight_per_worker=in_flight_per_worker,
    )
    raise_cache_errors(rows)  # a frame the cache could not keep stops the build: no item is lost to it
    if not rows:
        return pl.DataFrame(schema=FRAME_TABLE_SCHEMA)
    return pl.DataFrame(rows, schema=FRAME_TABLE_SCHEMA).sort([*VIDEO_KEY, "frame_index"])


ITEM_FRAMES_SCHEMA = {k: FRAME_TABLE_SCHEMA[k] for k in (*VIDEO_KEY, "frame_index", "pixel_sha256", "thumb")}


def item_frames(items: pl.DataFrame, frame_table: pl.DataFrame) -> pl.DataFrame:
    """The distinct frames the items show, with their pixel hash and grey thumbnail (ITEM_FRAMES_SCHEMA): what the
    validity audit compares, kept beside the items so it never reads the frame cache or the upstream data again."""
    wanted = requests_from_items(items)
    ok = (
        frame_table.filter(pl.col("status") == "ok")
        .select(list(ITEM_FRAMES_SCHEMA))
        .unique([*VIDEO_KEY, "frame_index"])
    )
    return (
        wanted.join(ok, on=[*VIDEO_KEY, "frame_index"], how="inner")
        .select(list(ITEM_FRAMES_SCHEMA))
        .cast(ITEM_FRAMES_SCHEMA)
        .sort([*VIDEO_KEY, "frame_index"])
    )


def extract_from_config(
    requests: pl.DataFrame, open_reader, cache: FrameCache, cfg: Settings, progress=None
) -> pl.DataFrame:
    """extract_frames with workers / mp_context / in-flight bound from configs/frames.yaml."""
    fr = cfg.frames
    return extract_frames(
        requests,
        open_reader,
        cache,
        workers=fr.workers,
        progress=progress,
        mp_context=fr.mp_context,
        in_flight_per_worker=fr.in_flight_per_worker,
    )
