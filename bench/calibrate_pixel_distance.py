"""Calibrate T8/T9's `min_pixel_distance` (configs/tasks/T8.yaml, T9.yaml): the grey-thumbnail mean absolute
difference (pipeline.frames.pixels.thumbnail / thumb_mad, `frames.stats.thumb_size` px) every two frames of an item
must exceed. Numbers, not pass/fail (docs/engineering.md, "Calibrations" for the method and the figure).

Two sides, both measured through the build's own path (PyAV encode with the sample corpora's codec settings,
upstream_adapters.samples.common.encode_video; decode; thumbnail; thumb_mad):

* noise: a static scene (seeded smooth texture, table-top-like) under per-frame sensor noise (sigma grey levels) and
  auto-exposure flicker (a per-frame gain of +-g), every codec the adapters meet. Two frames that differ only by this
  show nothing a model could order: the threshold must sit above the largest such distance.
* change: the same scene with one object (side `size` x the frame height, grey contrast `contrast` to the background)
  moved by its own width, the smallest state change T8/T9 mean to show (a grasped object lifted or put down; the arm
  and gripper move too in real footage, which only adds distance).

* cost (--work DIR, a build's work folder): per source, the closest pair of frames of every T8/T9 item the build kept
  (thumbnails from items/<slug>_frames.parquet) and the items its gate dropped as too alike: how many items a
  threshold t would keep.

    .venv/bin/python bench/calibrate_pixel_distance.py [--frames 16] [--out FILE.json] [--work DIR ...]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from pathlib import Path

import av
import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.settings.config import load_settings
from pipeline.frames.pixels import thumb_mad, thumbnail
from upstream_adapters.samples.common import encode_video

W, H = 640, 480
CODECS = ("h264", "av1", "hevc")


def scene(rng: np.random.Generator) -> np.ndarray:
    """A static RGB scene: a smooth random texture (low-pass noise, 40-200 grey) over a vertical gradient."""
    small = rng.uniform(40, 200, size=(12, 16, 3)).astype(np.float32)
    tex = cv2.resize(small, (W, H), interpolation=cv2.INTER_CUBIC)
    grad = np.linspace(-20, 20, H, dtype=np.float32)[:, None, None]
    return np.clip(tex + grad, 0, 255)


def with_object(base: np.ndarray, size: float, contrast: float, x_frac: float) -> np.ndarray:
    """The scene with a square object of side size*H px, `contrast` grey levels above its background, at x_frac."""
    img = base.copy()
    s = max(1, int(round(size * H)))
    x0, y0 = int(x_frac * (W - s)), (H - s) // 2
    patch = img[y0 : y0 + s, x0 : x0 + s]
    img[y0 : y0 + s, x0 : x0 + s] = np.clip(patch.mean(axis=(0, 1)) + contrast, 0, 255)
    return img


def noisy(img: np.ndarray, rng: np.random.Generator, sigma: float, gain: float) -> np.ndarray:
    g = 1.0 + rng.uniform(-gain, gain)
    return np.clip(img * g + rng.normal(0.0, sigma, img.shape), 0, 255).astype(np.uint8)


def decoded_thumbs(frames: list[np.ndarray], codec: str, size: int) -> list[str]:
    data = encode_video(frames, fps=30.0, codec=codec, gop=30)
    with av.open(io.BytesIO(data)) as c:
        return [thumbnail(f.to_ndarray(format="rgb24"), size).tobytes().hex() for f in c.decode(video=0)]


def noise_floor(rng, n: int, size: int, sigma: float, gain: float, codec: str) -> list[float]:
    base = scene(rng)
    thumbs = decoded_thumbs([noisy(base, rng, sigma, gain) for _ in range(n)], codec, size)
    return [thumb_mad(a, b) for a, b in itertools.combinations(thumbs, 2)]


def change(rng, size_frac: float, contrast: float, size: int, codec: str, sigma: float, gain: float) -> list[float]:
    """Thumbnail MAD between the object at 0.3 and moved by its width, over 6 scenes (noise as given)."""
    out = []
    for _ in range(6):
        base = scene(rng)
        x0 = 0.3
        x1 = x0 + size_frac * H / (W - size_frac * H)
        a, b = with_object(base, size_frac, contrast, x0), with_object(base, size_frac, contrast, x1)
        t = decoded_thumbs([noisy(a, rng, sigma, gain), noisy(b, rng, sigma, gain)], codec, size)
        out.append(thumb_mad(t[0], t[1]))
    return out


def closest_pairs(work: Path) -> dict[str, dict]:
    """Per source of a build's work folder: the T8/T9 items' closest-pair thumbnail MAD, and the gate's too-alike
    drops (their MAD read from the quarantine reason)."""
    import polars as pl

    out = {}
    for items_file in sorted((work / "items").glob("*.parquet")):
        slug = items_file.stem
        if not (work / "items" / f"{slug}_frames.parquet").is_file():
            continue
        items = pl.read_parquet(items_file).filter(pl.col("task_id").is_in(["T8", "T9"]))
        frames = pl.read_parquet(work / "items" / f"{slug}_frames.parquet")
        thumb = {(r["unit_id"], r["camera"], r["frame_index"]): r["thumb"] for r in frames.iter_rows(named=True)}
        mads = []
        for r in items.iter_rows(named=True):
            ts = [thumb.get((r["unit_id"], r["camera"], int(i))) for i in r["frame_indices"]]
            if all(ts):
                mads.append(min(thumb_mad(a, b) for a, b in itertools.combinations(ts, 2)))
        q = pl.read_parquet(work / "items" / f"{slug}_quarantine.parquet")
        dropped = [
            float(m)
            for m in q["reason"].str.extract(r"too alike to order \(thumbnail MAD ([0-9.]+)", 1).drop_nulls().to_list()
        ]
        out[slug] = {
            "kept": len(mads),
            "dropped_too_alike": len(dropped),
            "kept_closest_pct": {p: float(np.percentile(mads, p)) for p in (1, 5, 25, 50)} if mads else {},
            "kept_below": {t: int(sum(m < t for m in mads)) for t in (3.5, 4.0, 5.0)},
            "dropped_below": {t: int(sum(m < t for m in dropped)) for t in (1.5, 2.0, 2.5)},
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=16, help="frames per noise clip (pairs = n(n-1)/2)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    ap.add_argument(
        "--work",
        type=Path,
        action="append",
        default=[],
        help="a build's work folder: what the threshold costs its T8/T9 items (repeatable)",
    )
    ap.add_argument("--cost-only", action="store_true", help="only the --work figures (no encoding)")
    args = ap.parse_args()
    size = int(load_settings().frames.stats.thumb_size)
    rng = np.random.default_rng(20261205)
    res: dict = {"thumb_size": size, "frame": [W, H], "noise": [], "change": []}
    print(f"thumbnail {size}x{size} of {W}x{H} frames; MAD in grey levels (0-255)")
    if args.cost_only:
        args.frames = 0
    if args.frames:
        print("noise only (static scene): codec, sensor sigma, exposure gain -> p50 / p99 / max over frame pairs")
    for codec, sigma, gain in itertools.product(CODECS, (2.0, 6.0), (0.0, 0.01, 0.02)) if args.frames else ():
        mads = noise_floor(rng, args.frames, size, sigma, gain, codec)
        row = {
            "codec": codec,
            "sigma": sigma,
            "gain": gain,
            "p50": float(np.percentile(mads, 50)),
            "p99": float(np.percentile(mads, 99)),
            "max": float(max(mads)),
        }
        res["noise"].append(row)
        print(
            f"  {codec:5s} sigma {sigma:3.0f} gain +-{gain:.2f}: {row['p50']:.2f} / {row['p99']:.2f} / {row['max']:.2f}"
        )
    if args.frames:
        print(
            "one object moved by its width (h264, sigma 2, gain +-0.01): side x frame height, contrast -> min / median"
        )
    for size_frac, contrast in itertools.product((0.1, 0.15, 0.2, 0.3), (30.0, 60.0)) if args.frames else ():
        mads = change(rng, size_frac, contrast, size, "h264", 2.0, 0.01)
        row = {"size": size_frac, "contrast": contrast, "min": float(min(mads)), "median": float(np.median(mads))}
        res["change"].append(row)
        print(f"  side {size_frac:.2f} contrast {contrast:3.0f}: {row['min']:.2f} / {row['median']:.2f}")
    for work in args.work:
        for slug, row in closest_pairs(work).items():
            res.setdefault("cost", {})[f"{work}:{slug}"] = row
            print(
                f"{work} {slug}: T8/T9 kept {row['kept']} (closest pair p1/p5/p50 "
                + " / ".join(f"{v:.2f}" for k, v in row["kept_closest_pct"].items() if k != 25)
                + f"), dropped as too alike {row['dropped_too_alike']}; kept below 3.5/4/5: "
                + " / ".join(map(str, row["kept_below"].values()))
                + "; dropped below 1.5/2/2.5: "
                + " / ".join(map(str, row["dropped_below"].values()))
            )
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
