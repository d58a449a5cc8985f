"""The images shown to the model, rendered from an item's frame indices + render_spec_json alone.

- plain items (render_spec_json null): the frames in frame_indices order, each resized by the size policy
  (configs/frames.yaml `image`: longer side <= max_side, INTER_AREA, never upscaled; null = native).
- kind "labelled_frames" (T8): one image per frame, resized to spec.size (null = native), label drawn top-left.
- kind "panels" (T9): one composite: the frames resized to spec.size, each labelled, side by side in spec order,
  `gap` pixels apart (gap colour spec.gap_color, default white; shorter panels padded at the bottom with it).

Labels: cv2.putText with the Hershey font named in spec.label.font (e.g. HERSHEY_SIMPLEX), scale and thickness,
LINE_8 (no anti-aliasing), colour spec.label.color (RGB) on a filled box spec.label.background; the box's top-left
corner sits `margin` pixels from the image's top-left corner and pads the text by margin // 2 on every side.

Every rendered image is identified by `image_sha256` (sha256 of its RGB pixels + shape, see pixels.py), recorded
per item as image_hashes_json, so anyone who re-renders from upstream data can check pixel equality.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import cv2
import numpy as np
import polars as pl

from pipeline.core.io import atomic_write_bytes, compact_json
from .cache import BadEntry, FrameCache
from .pixels import as_rgb, encode_png, pixel_sha256
from pipeline.core.pool import resolve_workers
from pipeline.release.files import image_filename

RENDER_VERSION = 1
log = logging.getLogger(__name__)
GetFrame = Callable[[int], np.ndarray]

image_sha256 = pixel_sha256


def _json(v):
    if v is None:
        return None
    return json.loads(v) if isinstance(v, str) else v


def frame_indices_of(item: dict) -> list[int]:
    fi = item.get("frame_indices")
    if fi is None:
        fi = _json(item.get("frame_indices_json"))
    if fi is None:
        raise ValueError("item has neither frame_indices nor frame_indices_json")
    return [int(i) for i in fi]


def render_spec_of(item: dict) -> dict | None:
    return _json(item.get("render_spec_json"))


def fit_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """Target (w, h) under the plain-item size policy."""
    if not max_side or max(width, height) <= max_side:
        return width, height
    scale = max_side / max(width, height)
    return max(1, int(width * scale + 0.5)), max(1, int(height * scale + 0.5))


def resize_to(img: np.ndarray, size: Sequence[int] | None) -> np.ndarray:
    """Resize to (w, h) with INTER_AREA; None or the native size -> an unchanged copy."""
    img = as_rgb(img)
    if size is None:
        return img.copy()
    w, h = int(size[0]), int(size[1])
    if (w, h) == (img.shape[1], img.shape[0]):
        return img.copy()
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)


def apply_size_policy(img: np.ndarray, size_policy: dict | None) -> np.ndarray:
    img = as_rgb(img)
    max_side = size_policy["max_side"] if size_policy else None
    return resize_to(img, fit_size(img.shape[1], img.shape[0], max_side))


def _font(name: str) -> int:
    font = getattr(cv2, "FONT_" + str(name).upper().removeprefix("FONT_"), None)
    if font is None:
        raise ValueError(f"unknown Hershey font {name!r}")
    return font


def draw_label(img: np.ndarray, text: str, label: dict) -> np.ndarray:
    """Draw `text` on a filled box at the top-left corner (in place; returns img)."""
    if label.get("position", "top_left") != "top_left":
        raise ValueError(f"unsupported label position {label.get('position')!r}")
    font = _font(label.get("font", "HERSHEY_SIMPLEX"))
    scale = float(label.get("scale", 1.0))
    thickness = int(label.get("thickness", 1))
    margin = int(label.get("margin", 0))
    pad = margin // 2
    (tw, th), baseline = cv2.getTextSize(str(text), font, scale, thickness)
    x0, y0 = margin, margin
    x1, y1 = x0 + tw + 2 * pad, y0 + th + baseline + 2 * pad
    cv2.rectangle(
        img,
        (x0, y0),
        (x1 - 1, y1 - 1),
        tuple(int(c) for c in label.get("background", (0, 0, 0))),
        thickness=-1,
        lineType=cv2.LINE_8,
    )
    cv2.putText(
        img,
        str(text),
        (x0 + pad, y0 + pad + th),
        font,
        scale,
        tuple(int(c) for c in label.get("color", (255, 255, 255))),
        thickness,
        cv2.LINE_8,
        False,
    )
    return img


def _labelled(spec: dict, get_frame: GetFrame) -> list[np.ndarray]:
    labels = list(spec.get("labels") or [])
    indices = [int(i) for i in spec["frame_indices"]]
    if len(labels) != len(indices):
        raise ValueError(f"render_spec has {len(labels)} labels for {len(indices)} frames")
    out = []
    for text, i in zip(labels, indices):
        img = resize_to(get_frame(i), spec.get("size"))
        out.append(draw_label(img, text, spec.get("label") or {}))
    return out


def render_item_images(item: dict, get_frame: GetFrame, size_policy: dict | None = None) -> list[np.ndarray]:
    """The images shown for `item` (a row dict), in order. get_frame(frame_index) -> native RGB of the item's video.

    size_policy: configs/frames.yaml `image` section (plain items only); None = native size.
    """
    spec = render_spec_of(item)
    if spec is None:
        return [apply_size_policy(get_frame(i), size_policy) for i in frame_indices_of(item)]
    if int(spec.get("version", 1)) != 1:
        raise ValueError(f"unsupported render_spec version {spec.get('version')!r}")
    indices = [int(i) for i in spec["frame_indices"]]
    declared = item.get("frame_indices", item.get("frame_indices_json"))
    if declared is not None and frame_indices_of(item) != indices:
        raise ValueError(f"render_spec frame_indices {indices} != item frame_indices {frame_indices_of(item)}")
    kind = spec.get("kind")
    if kind == "labelled_frames":
        return _labelled(spec, get_frame)
    if kind == "panels":
        panels = _labelled(spec, get_frame)
        gap = int(spec.get("gap", 0))
        colour = np.array(spec.get("gap_color", (255, 255, 255)), np.uint8)
        height = max(p.shape[0] for p in panels)
        width = sum(p.shape[1] for p in panels) + gap * (len(panels) - 1)
        canvas = np.empty((height, width, 3), np.uint8)
        canvas[:] = colour
        x = 0
        for p in panels:
            canvas[: p.shape[0], x : x + p.shape[1]] = p
            x += p.shape[1] + gap
        return [canvas]
    raise ValueError(f"unknown render_spec kind {kind!r}")


def image_hashes(images: Sequence[np.ndarray]) -> list[str]:
    return [image_sha256(as_rgb(img)) for img in images]


def item_image_hashes(item: dict, get_frame: GetFrame, size_policy: dict | None = None) -> list[str]:
    return image_hashes(render_item_images(item, get_frame, size_policy))


def write_item_images(
    item_id: str, images: Sequence[np.ndarray], out_dir: Path, png_compression: int = 1, start: int = 0
) -> list[str]:
    """The images as <item_id>_<k>.png, k from `start` (a step item's images come in parts, one per step's video)."""
    names = []
    for k, img in enumerate(images, start=start):
        name = image_filename(item_id, k)
        atomic_write_bytes(Path(out_dir) / name, encode_png(img, png_compression))
        names.append(name)
    return names


def render_key(frame_keys: Sequence[str], pixel_hashes: Sequence[str], item: dict, size_policy: dict | None) -> str:
    """The render memo's key: the frames' cache keys AND their pixel hashes (so a memo cannot outlive a frame whose
    pixels changed, whatever the reason), plus the render spec or size policy."""
    import hashlib

    spec = render_spec_of(item)
    ident = [
        "pbrender",
        RENDER_VERSION,
        list(frame_keys),
        list(pixel_hashes),
        spec if spec is not None else {"size_policy": size_policy},
    ]
    return hashlib.sha256(compact_json(ident).encode()).hexdigest()


def _expected_images(item: dict) -> int:
    spec = render_spec_of(item)
    if spec is None:
        return len(frame_indices_of(item))
    return 1 if spec.get("kind") == "panels" else len(spec["frame_indices"])


def _needed_frames(item: dict) -> list[int]:
    """The frame indices an item's images are made of (its frame_indices, repeats kept, then any other frame its
    render spec shows); `item["render_spec_json"]` may be parsed already."""
    needed = frame_indices_of(item)
    spec = render_spec_of(item)
    if spec is not None:
        needed = sorted(set(needed) | {int(i) for i in spec["frame_indices"]})
    return needed


def _video_pixels(
    cache: FrameCache, video_key: tuple, indices: list[int], key_of: dict, open_reader, counters: Counter
) -> dict[int, np.ndarray | str]:
    """The checked cached pixels of frames `indices` of one video, its pack read once: {index: pixels, or why the
    frame cannot be had}. Bad or vanished entries are decoded again through `open_reader` (one task for all of them,
    one pack write) and read back. Counts into `counters` (this thread's), never into cache.counters."""
    keys = [key_of[(*video_key, i)][0] for i in indices]
    got: dict[int, np.ndarray | str | None] = dict(zip(indices, cache.get_many(keys, counters)))
    missing = tuple((i, k) for i, k in zip(indices, keys) if got[i] is None)
    video = "/".join(video_key)
    for i, _ in missing:
        got[i] = f"frame {i} of {video} is not in the frame cache, or its entry is bad"
    if missing and open_reader is not None:
        from .worker import VideoTask, raise_cache_errors, run_video

        res = run_video(VideoTask(open_reader, *video_key, missing, cache))
        raise_cache_errors(res["rows"])
        counters["decoded"] += res["decoded"]
        failed = {r["frame_index"]: r["reason"] for r in res["rows"] if r["status"] != "ok"}
        got.update((i, f"frame {i} of {video} cannot be decoded again: {why}") for i, why in failed.items())
        again = [(i, k) for i, k in missing if i not in failed]
        for (i, _), img in zip(again, cache.get_many([k for _, k in again], counters)):
            if img is not None:
                got[i] = img
    return got


def _render_video(
    cache: FrameCache,
    video_key: tuple,
    jobs: list[tuple[int, dict]],
    key_of: dict,
    size_policy: dict | None,
    open_reader,
) -> tuple[list[tuple[int, list[str] | str]], Counter]:
    """Render the items of one video (run on a pool thread): [(position, hashes, or the reason it cannot be
    rendered)] in `jobs` order, and this video's counters. Its frames are read once (one pack read), shared by its
    items."""
    counters: Counter = Counter()
    needed = sorted({i for _, item in jobs for i in _needed_frames(item)})
    frames = _video_pixels(cache, video_key, needed, key_of, open_reader, counters)

    def get_frame(i: int) -> np.ndarray:
        img = frames[i]
        if isinstance(img, str):
            raise BadEntry(img)
        return img

    out: list[tuple[int, list[str] | str]] = []
    for n, item in jobs:
        try:
            out.append((n, item_image_hashes(item, get_frame, size_policy)))
        except (KeyError, BadEntry) as exc:  # a frame that cannot be had any more: no images
            out.append((n, str(exc)))
    return out, counters


def add_image_hashes(
    items: pl.DataFrame,
    frame_table: pl.DataFrame,
    cache: FrameCache,
    size_policy: dict | None,
    open_reader=None,
    workers: int | None = None,
) -> pl.DataFrame:
    """Add image_hashes_json (compact JSON list of sha256) to each item, rendering from the frame cache.

    Items whose frames are not all ok in `frame_table` get null (the visual gate drops them anyway). A plain item
    whose frames the size policy leaves at their native size shows exactly its frames, so its hashes are the frames'
    pixel_sha256 in `frame_table` (checked when the frames were decoded or looked up): no frame is read. Rendered hashes
    are memoised in the cache (render key = frame cache keys + pixel hashes + render spec / size policy), so a
    rebuild after a question-template change neither decodes nor renders again. Frames read for rendering are
    checked; a bad entry is decoded again through `open_reader` (the extraction's reader factory) when given.
    workers: threads rendering videos at once (pool.resolve_workers: None/0 = cores); cv2, PNG decoding and hashlib
    release the GIL. Memo lookups, memo writes, counters and warnings stay in this thread, in item order.
    """
    ok = frame_table.filter(pl.col("status") == "ok")
    key_of = {
        (s, u, c, int(i)): (k, h)
        for s, u, c, i, k, h in ok.select(
            "source", "unit_id", "camera", "frame_index", "cache_key", "pixel_sha256"
        ).iter_rows()
    }
    max_side = size_policy["max_side"] if size_policy else None
    # frames the plain-item size policy leaves native: their image is the frame itself (apply_size_policy copies it)
    native = {
        (s, u, c, int(i))
        for s, u, c, i, w, h in ok.select("source", "unit_id", "camera", "frame_index", "width", "height").iter_rows()
        if fit_size(w, h, max_side) == (w, h)
    }
    hashes: list[str | None] = [None] * items.height
    rows = list(items.iter_rows(named=True))
    rkeys: dict[int, str] = {}
    todo: dict[tuple, list[tuple[int, dict]]] = {}  # video -> its items without a (good) memo, in item order
    same: dict[str, list[int]] = {}  # render key to render -> the later items with that key
    for n, item in enumerate(rows):
        video_key = (item["source"], item["unit_id"], item["camera"])
        try:
            spec = render_spec_of(item)
            item = rows[n] = {**item, "render_spec_json": spec}  # parsed once, not again by each step below
            needed = _needed_frames(item)
            fkeys = [key_of[(*video_key, i)] for i in needed]
        except (KeyError, ValueError):
            continue
        if spec is None and all((*video_key, i) in native for i in needed):
            # no pixels needed: the images' hashes are the frames' checked pixel hashes (so no memo either)
            cache.counters["rendered"] += 1
            hashes[n] = compact_json([key_of[(*video_key, i)][1] for i in needed])
            continue
        rkey = rkeys[n] = render_key([k for k, _ in fkeys], [h for _, h in fkeys], item, size_policy)
        memo = cache.get_render(rkey)
        if memo is not None and len(memo) != _expected_images(item):
            cache.counters["bad_renders"] += 1
            memo = None
        if memo is None and rkey in same:  # another item shows the same images: rendered once, for both
            same[rkey].append(n)
        elif memo is None:
            same[rkey] = []
            todo.setdefault(video_key, []).append((n, item))
        else:
            cache.counters["render_hits"] += 1
            hashes[n] = compact_json(memo)
    videos = sorted(todo)  # grouped by video: a video's frames are read once for its items, then dropped

    def render(video_key: tuple):
        return _render_video(cache, video_key, todo[video_key], key_of, size_policy, open_reader)

    threads = min(resolve_workers(workers), len(videos))
    try:
        if threads > 1:
            pool = ThreadPoolExecutor(threads)
            try:
                _collect(pool.map(render, videos), rows, rkeys, same, hashes, cache)
            finally:  # a render that raised: the videos not started yet are not rendered
                pool.shutdown(cancel_futures=True)
        else:
            _collect(map(render, videos), rows, rkeys, same, hashes, cache)
    finally:  # what was rendered stays memoised, even when a render raised
        cache.flush_renders()
    return items.with_columns(pl.Series("image_hashes_json", hashes, dtype=pl.String))


def _collect(
    results, rows: list[dict], rkeys: dict[int, str], same: dict[str, list[int]], hashes: list, cache: FrameCache
) -> None:
    """Per video, in video order: sum its counters, memoise and record each item's hashes, log what failed."""
    for out, counters in results:
        for name, v in counters.items():
            cache.counters[name] += v
        for n, memo in out:
            if isinstance(memo, str):
                for m in (n, *same[rkeys[n]]):
                    log.warning("item %s: cannot render its images: %s", rows[m].get("candidate_key"), memo)
                continue
            cache.put_render(rkeys[n], memo)
            cache.counters["rendered"] += 1
            cache.counters["render_hits"] += len(same[rkeys[n]])
            for m in (n, *same[rkeys[n]]):
                hashes[m] = compact_json(memo)
