"""What the images of eval and SFT share, and how far apart the frames of T8/T9 items are.

Perceptual hash: a 64-bit DCT hash (the pHash recipe: DCT of a 16x16 grey image, the 8x8 lowest frequencies against
their median) of each frame's grey thumbnail, which the items step keeps beside the items (items/<slug>_frames.parquet),
so no frame is decoded or looked up again. Near
duplicates (Hamming distance <= k) are found with the pigeonhole index: split the 64 bits into k + 1 blocks; two
hashes within distance k agree exactly on at least one block.
"""

from __future__ import annotations

import json
from collections import defaultdict
from statistics import median

from pathlib import Path

import cv2
import numpy as np
import polars as pl

from ..frames.pixels import thumb_mad


def _low_frequencies(thumb_hex: str) -> np.ndarray:
    g = np.frombuffer(bytes.fromhex(thumb_hex), np.uint8)
    side = int(round(len(g) ** 0.5))
    g = g.reshape(side, side).astype(np.float32)
    if side != 16:
        g = cv2.resize(g, (16, 16), interpolation=cv2.INTER_AREA)
    return cv2.dct(g)[:8, :8].flatten()


def phashes_of_thumbs(thumbs: list[str]) -> list[int]:
    """phash_of_thumb of many thumbnails at once (the median and the bit packing over one array)."""
    if not thumbs:
        return []
    low = np.stack([_low_frequencies(t) for t in thumbs])
    bits = low > np.median(low[:, 1:], axis=1)[:, None]  # first coefficient = most significant bit
    return [int.from_bytes(row.tobytes(), "big") for row in np.packbits(bits, axis=1)]


def phash_of_thumb(thumb_hex: str) -> int:
    return phashes_of_thumbs([thumb_hex])[0]


def _blocks(k: int) -> list[tuple[int, int]]:
    n = k + 1
    edges = [round(64 * i / n) for i in range(n + 1)]
    return [(edges[i], edges[i + 1] - edges[i]) for i in range(n)]


def near_matches(queries: list[int], refs: list[int], k: int) -> list[bool]:
    """For each query hash, whether some reference hash is within Hamming distance k."""
    blocks = _blocks(k)
    index: list[dict[int, list[int]]] = [defaultdict(list) for _ in blocks]
    uniq = sorted(set(refs))
    for h in uniq:
        for b, (lo, w) in enumerate(blocks):
            index[b][(h >> lo) & ((1 << w) - 1)].append(h)
    out = []
    for q in queries:
        hit = False
        for b, (lo, w) in enumerate(blocks):
            for h in index[b].get((q >> lo) & ((1 << w) - 1), ()):
                if bin(q ^ h).count("1") <= k:
                    hit = True
                    break
            if hit:
                break
        out.append(hit)
    return out


def frames_of(row: dict) -> list[int]:
    return [int(i) for i in json.loads(row["frame_indices_json"] or "[]")]


class FrameThumbs:
    """Frame thumbnails by (source, unit_id, camera, frame_index), from the items steps' frame tables
    (items/<slug>_frames.parquet: every frame an item shows, with its grey thumbnail); a frame not there has none."""

    def __init__(self, work_dir: Path, sources: list[str]):
        self._thumb: dict[tuple, str] = {}
        for s in sources:
            path = Path(work_dir) / "items" / f"{s}_frames.parquet"
            if path.is_file():
                cols = ["source", "unit_id", "camera", "frame_index", "thumb"]
                for src, u, c, i, t in pl.read_parquet(path, columns=cols).iter_rows():
                    self._thumb[(src, u, c, int(i))] = t

    def __call__(self, source: str, unit_id: str, camera: str, index: int) -> str | None:
        return self._thumb.get((source, unit_id, camera, int(index)))


def _thumbs(row: dict, thumbs) -> list[str | None]:
    return [thumbs(row["source_slug"], row["source_unit_id"], row["camera"], i) for i in frames_of(row)]


def shared_images(sft_rows: list[dict], eval_rows: list[dict], thumbs, k: int) -> dict:
    """Eval items showing an image pixel-identical to an SFT image (image_hashes_json), and eval items with a frame
    whose perceptual hash is within k of an SFT frame's."""
    sft_sha = {h for r in sft_rows for h in json.loads(r.get("image_hashes_json") or "[]")}
    exact = sum(1 for r in eval_rows if sft_sha & set(json.loads(r.get("image_hashes_json") or "[]")))
    sft_thumbs = [t for r in sft_rows for t in _thumbs(r, thumbs)]
    eval_thumbs = [_thumbs(r, thumbs) for r in eval_rows]
    missing = sum(t is None for t in sft_thumbs) + sum(t is None for ts in eval_thumbs for t in ts)
    distinct = sorted({t for t in sft_thumbs if t is not None} | {t for ts in eval_thumbs for t in ts if t is not None})
    phash = dict(zip(distinct, phashes_of_thumbs(distinct)))  # each distinct thumbnail hashed once
    ref = [phash[t] for t in sft_thumbs if t is not None]
    per_item = [[phash[t] for t in ts if t is not None] for ts in eval_thumbs]
    flat = [h for hs in per_item for h in hs]
    hits = iter(near_matches(flat, ref, k))
    near = sum(1 for hs in per_item if any([next(hits) for _ in hs]))
    n = len(eval_rows)
    return {
        "exact_shared": exact,
        "near_shared": near,
        "near_shared_fraction": round(near / n, 4) if n else None,
        "frames_without_thumb": missing,
    }


def temporal_gaps(rows: list[dict], fps_of, thumbs) -> dict:
    """Per item: the smallest gap (seconds) between two of its frames, and the thumbnail difference of that pair."""
    gaps, diffs, missing = [], [], 0
    for r in rows:
        fr = sorted(frames_of(r))
        fps = fps_of(r["source_slug"], r["source_unit_id"])
        if len(fr) < 2 or not fps:
            missing += 1
            continue
        j = min(range(len(fr) - 1), key=lambda i: fr[i + 1] - fr[i])
        gaps.append((fr[j + 1] - fr[j]) / fps)
        a = thumbs(r["source_slug"], r["source_unit_id"], r["camera"], fr[j])
        b = thumbs(r["source_slug"], r["source_unit_id"], r["camera"], fr[j + 1])
        if a is not None and b is not None:
            diffs.append(thumb_mad(a, b))
    q = lambda xs, p: round(float(np.quantile(xs, p)), 3) if xs else None
    return {
        "n": len(rows),
        "median_gap_s": round(median(gaps), 3) if gaps else None,
        "p10_gap_s": q(gaps, 0.1),
        "median_visual_diff": round(median(diffs), 3) if diffs else None,
        "p10_visual_diff": q(diffs, 0.1),
        "items_without_gap": missing,
    }
