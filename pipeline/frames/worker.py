"""The per-video unit of work, run in pool workers (kept free of polars so workers start light).

One task = one video = (source, unit_id, camera) with its sorted missing frame indices and their cache keys:
open the video once, decode exactly those frames, write them into the video's cache pack with their stats (one
write), return small rows.
Any exception becomes error rows for the frames of that video (after a failed batch each frame is retried alone,
so only the frames that really fail get error rows); nothing is raised. Frames that decoded but could not be written
into the cache get CACHE_ERROR rows, which the callers turn into a build error (`raise_cache_errors`).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass

from pipeline.core.leaks import redact_paths
from .cache import FrameCache
from .pixels import as_rgb, frame_stats


CACHE_ERROR = "cache_error"  # the frame decoded but could not be written into the frame cache


class CacheWriteError(RuntimeError):
    """Frames decoded but not written into the frame cache (a full disk, a read-only work folder): a build error,
    never an item the visual gate drops as "unreadable"."""


def raise_cache_errors(rows: list[dict]) -> None:
    """CacheWriteError naming how many frames and the first one, when a row of `rows` has status CACHE_ERROR."""
    bad = sorted(
        (r for r in rows if r["status"] == CACHE_ERROR),
        key=lambda r: (r["source"], r["unit_id"], r["camera"], r["frame_index"]),
    )
    if bad:
        r = bad[0]
        raise CacheWriteError(
            f"{len(bad)} decoded frame(s) could not be written into the frame cache (first: "
            f"{r['source']}/{r['unit_id']} {r['camera']} frame {r['frame_index']}: {r['reason']}); "
            "the build stops instead of dropping their items: free space or fix the work folder's "
            "permissions, then build again"
        )


SINGLE_RETRY_MAX = 256  # after a failed batch, retry at most this many frames one by one ...
SINGLE_RETRY_GIVE_UP = 3  # ... and stop when the first this-many all fail (a missing or unreadable video)


@dataclass(frozen=True)
class VideoTask:
    open_reader: object  # picklable factory: source -> reader(unit_id, camera, indices)
    source: str
    unit_id: str
    camera: str
    frames: tuple[tuple[int, str], ...]  # (frame_index, cache key), sorted by index
    cache: FrameCache


def _row(task: VideoTask, index: int, key: str, status: str, reason: str | None, stats: dict | None) -> dict:
    stats = stats or {}
    return {
        "source": task.source,
        "unit_id": task.unit_id,
        "camera": task.camera,
        "frame_index": int(index),
        "cache_key": key,
        "status": status,
        "reason": reason,
        "pixel_sha256": stats.get("pixel_sha256"),
        "height": stats.get("height"),
        "width": stats.get("width"),
        "mean": stats.get("mean"),
        "std": stats.get("std"),
        "thumb": stats.get("thumb"),
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory (MiB). Linux: VmHWM (ru_maxrss would include the RSS a forked or
    exec'd process inherits from its parent); elsewhere ru_maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    div = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / div


def error_result(task: VideoTask, reason: str) -> dict:
    return {
        "rows": [_row(task, i, k, "error", reason, None) for i, k in task.frames],
        "decoded": 0,
        "errors": len(task.frames),
        "rss_mb": 0.0,
    }


def read_with_fallback(reader, unit_id: str, camera: str, indices: list[int]) -> tuple[dict, dict[int, str]]:
    """One call for the whole video; if it raises, retry frame by frame (this error path only), because readers fail
    the whole batch when any index fails and one bad index must not take the video's good frames with it.
    Returns ({index: image}, {index: reason} for the frames that failed)."""
    try:
        got = reader(unit_id, camera, indices)
        return (got if isinstance(got, dict) else {}), {}
    except Exception as exc:  # noqa: BLE001 - any reader error: the frames are retried one by one
        # path-free: a decoder or file error quoting the upstream file's absolute path reaches the quarantine table
        reason = redact_paths(f"cannot read frames: {type(exc).__name__}: {exc}")
        if len(indices) == 1 or len(indices) > SINGLE_RETRY_MAX:
            return {}, {i: reason for i in indices}
    got, failed = {}, {}
    for n, i in enumerate(indices):
        if n == SINGLE_RETRY_GIVE_UP and not got:  # the first frames all fail too: the video itself is unreadable
            failed.update({j: reason for j in indices[n:]})
            break
        try:
            got.update(reader(unit_id, camera, [i]))
        except Exception as exc:  # noqa: BLE001 - one unreadable frame is reported, never fatal
            failed[i] = f"cannot read frame: {type(exc).__name__}: {exc}"
    return got, failed


def run_video(task: VideoTask) -> dict:
    """Decode one video's missing frames into the cache. Returns {"rows", "decoded", "errors", "rss_mb" (this
    process's peak RSS)}; never raises."""
    cache = task.cache
    try:
        reader = task.open_reader(task.source)
    except Exception as exc:  # noqa: BLE001 - any failure of this video is reported, never raised
        return error_result(task, f"cannot open reader: {type(exc).__name__}: {exc}")
    got, failed = read_with_fallback(reader, task.unit_id, task.camera, [i for i, _ in task.frames])
    rows: dict[int, dict] = {}
    entries = []
    for index, key in task.frames:
        img = got.get(index) if isinstance(got, dict) else None
        if img is None:
            rows[index] = _row(task, index, key, "error", failed.get(index, "frame not returned by the reader"), None)
            continue
        try:
            img = as_rgb(img)
            stats = frame_stats(img, cache.thumb_size)
        except Exception as exc:  # noqa: BLE001 - a frame that cannot be measured is an error row
            rows[index] = _row(task, index, key, "error", f"{type(exc).__name__}: {exc}", None)
            continue
        entries.append((index, key, img, stats))
        rows[index] = _row(task, index, key, "ok", None, stats)
    try:
        cache.put_many([(key, img, stats) for _, key, img, stats in entries])  # the video's frames: one pack write
    except Exception as exc:  # noqa: BLE001 - e.g. a full disk: none of them is cached
        reason = redact_paths(f"cannot write the frame cache: {type(exc).__name__}: {exc}")
        for index, key, _, _ in entries:
            rows[index] = _row(task, index, key, CACHE_ERROR, reason, None)
    out = [rows[i] for i, _ in task.frames]
    errors = sum(r["status"] != "ok" for r in out)
    return {"rows": out, "decoded": len(out) - errors, "errors": errors, "rss_mb": peak_rss_mb()}
