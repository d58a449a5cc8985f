"""Rebuild every item's images from the researcher's own copy of the upstream data, and verify them.

    report = reconstruct(release_dir, {"gm100": Path("/data/gm100"), ...}, cfg, out_dir)

Reads the release tables (configs/release.yaml files.eval_parquet / files.sft_parquet), groups items per video
(source_slug, source_unit_id, camera), decodes each video's frames once through the source's adapter (the same
`read_frames` the build used), renders each item's images from frame_indices_json + render_spec_json alone
(render.py), compares their pixel hashes with image_hashes_json, and writes the images that match (or that have no
recorded hash) to <out_dir>/images/<item_id>_<k>.png. Per source it reports items ok / missing (the unit or a frame
could not be read) / differs (decoded, but the pixels differ from the release) / unverified (no hash recorded).
The full per-item list of problems goes to <out_dir>/reconstruction_report.json.

Every command that reads these images (`eval --images`, `review --images`) takes that <out_dir> or its images/
folder: `images_folder(path, cfg)` is the one place that tells them apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from upstream_adapters.media import video

from pipeline.core.errors import ProjectError
from pipeline.core.io import write_json
from pipeline.core.pool import run_tasks
from pipeline.release.files import eval_level_files
from pipeline.frames.readers import AdapterReaders
from pipeline.frames.render import (
    RENDER_VERSION,
    frame_indices_of,
    image_hashes,
    render_item_images,
    render_spec_of,
    write_item_images,
)
from pipeline.frames.worker import read_with_fallback

from pipeline.settings.models import ReconstructionSource

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

COLUMNS = [
    "item_id",
    "source_slug",
    "source_unit_id",
    "camera",
    "frame_indices_json",
    "render_spec_json",
    "image_hashes_json",
]
STATUSES = ("ok", "missing", "differs", "unverified")
_IMAGE_NAME = re.compile(r".+_\d+\.png")  # render.image_filename: <item_id>_<k>.png


class ImagesFolderError(ProjectError):
    """A folder given as --images that is neither `reconstruct --out`'s folder nor its images folder."""


def images_folder(path: Path, cfg: Settings) -> Path:
    """The folder holding the reconstructed image files (<item_id>_<k>.png), given either the folder `processbench
    reconstruct --out` wrote (its `frames.reconstruction.images_dir`, images/, inside) or that images folder itself
    (it holds such files, or it is named so beside the reconstruction report). ImagesFolderError, one line saying
    what was expected, for anything else."""
    rc = cfg.frames.reconstruction
    path = Path(path)
    expected = (
        f"expected the folder `processbench reconstruct --out` wrote (with {rc.images_dir}/ and {rc.report_file} in "
        f"it) or that {rc.images_dir}/ folder (with <item_id>_<k>.png files)"
    )
    if not path.is_dir():
        raise ImagesFolderError(
            f"--images {path.absolute()}: {'not a folder' if path.exists() else 'no such folder'}; {expected}"
        )
    if (path / rc.images_dir).is_dir():
        return path / rc.images_dir
    if (path.name == rc.images_dir and (path.parent / rc.report_file).is_file()) or _holds_images(path):
        return path
    raise ImagesFolderError(f"--images {path.absolute()}: neither holds {rc.images_dir}/ nor any image; {expected}")


def _holds_images(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(e.is_file() and _IMAGE_NAME.fullmatch(e.name) for e in entries)


@dataclass(frozen=True)
class ReconTask:
    open_reader: object
    source: str
    unit_id: str
    camera: str
    items: tuple[tuple, ...]  # (item_id, frame_indices_json, render_spec_json, image_hashes_json, first_image)
    images_dir: str
    size_policy: dict | None
    png_compression: int
    decoder: str
    decoder_threads: int


def _result(task: ReconTask, item_id: str, status: str, reason: str | None = None, images: int = 0) -> dict:
    return {
        "item_id": item_id,
        "source": task.source,
        "unit_id": task.unit_id,
        "camera": task.camera,
        "status": status,
        "reason": reason,
        "images": images,
    }


def _fail(task: ReconTask, reason: str) -> list[dict]:
    return [_result(task, it[0], "missing", reason) for it in task.items]


def run_recon(task: ReconTask) -> list[dict]:
    """Decode one video once, render and verify its items, write the images. Never raises."""
    items = [
        {"item_id": a, "frame_indices_json": b, "render_spec_json": c, "image_hashes_json": d, "first": e}
        for a, b, c, d, e in task.items
    ]
    needed: set[int] = set()
    for it in items:
        try:
            needed.update(frame_indices_of(it))
            spec = render_spec_of(it)
            if spec:
                needed.update(int(i) for i in spec.get("frame_indices", []))
        except (ValueError, TypeError, json.JSONDecodeError):
            pass
    try:
        reader = task.open_reader(task.source)
    except Exception as exc:  # noqa: BLE001 - a source that cannot be opened fails its items, with why
        return _fail(task, f"cannot open reader: {type(exc).__name__}: {exc}")
    frames, failed = read_with_fallback(reader, task.unit_id, task.camera, sorted(needed))
    out = []
    for it in items:
        item_id = it["item_id"]

        def get_frame(i: int) -> np.ndarray:
            if i not in frames:
                raise LookupError(failed.get(i, f"frame {i} not returned by the reader"))
            return frames[i]

        try:
            images = render_item_images(it, get_frame, task.size_policy)
        except LookupError as exc:
            out.append(_result(task, item_id, "missing", str(exc).strip("'\"")))
            continue
        except Exception as exc:  # noqa: BLE001 - a malformed row
            out.append(_result(task, item_id, "missing", f"cannot render: {type(exc).__name__}: {exc}"))
            continue
        got = image_hashes(images)
        expected = json.loads(it["image_hashes_json"]) if it["image_hashes_json"] else None
        if expected is None:
            status, reason = "unverified", "no image_hashes_json in the release row"
        elif got == expected:
            status, reason = "ok", None
        else:
            if len(got) != len(expected):
                reason = f"{len(got)} images rendered, {len(expected)} hashes recorded"
            else:
                bad = [k for k, (a, b) in enumerate(zip(got, expected)) if a != b]
                reason = f"image(s) {bad} differ from the release (pixel sha256)"
            out.append(_result(task, item_id, "differs", reason))
            continue
        try:
            write_item_images(item_id, images, Path(task.images_dir), task.png_compression, start=it["first"])
        except Exception as exc:  # noqa: BLE001 - an item whose images cannot be written is reported missing
            out.append(_result(task, item_id, "missing", f"cannot write images: {type(exc).__name__}: {exc}"))
            continue
        out.append(_result(task, item_id, status, reason, len(images)))
    return out


def release_item_files(release_dir: Path, cfg: Settings) -> list[str]:
    """Every release table, release-relative: the eval file (L1), each eval level file split_summary.json lists (L2,
    L3, ...), then SFT."""
    return [*eval_level_files(Path(release_dir), cfg).values(), cfg.release.files.sft_parquet]


def read_release_items(release_dir: Path, cfg: Settings) -> pl.DataFrame:
    """The reconstruction columns of every release table, with `file` (the table's release-relative name) and
    `first_image` (0; a step item has one row per step, pipeline/steps/write.py step_recon_rows)."""
    from pipeline.steps.write import step_recon_rows

    frames = [step_recon_rows(release_dir, cfg)]
    for rel in release_item_files(release_dir, cfg):
        path = Path(release_dir) / rel
        if path.exists():
            missing = [c for c in COLUMNS if c not in pl.read_parquet_schema(path)]
            if missing:
                raise ValueError(f"{path.resolve()}: lacks columns {missing}")
            frames.append(
                pl.read_parquet(path, columns=COLUMNS)
                .select([pl.col(c).cast(pl.String) for c in COLUMNS])
                .with_columns(file=pl.lit(rel), first_image=pl.lit(0, pl.Int64))
            )
    if len(frames) == 1:
        raise FileNotFoundError(
            f"no release tables ({', '.join(release_item_files(release_dir, cfg))}) in {Path(release_dir).resolve()}"
        )
    return pl.concat(frames).sort("item_id", "first_image")


def reconstruct(
    release_dir: Path,
    upstream: dict[str, Path],
    cfg: Settings,
    out_dir: Path,
    sources=None,
    workers: int | None = None,
    progress=None,
    item_ids=None,
    fingerprint: str | None = None,
) -> dict:
    """Rebuild and verify the images of every item of `sources` (default: the slugs in `upstream`); `item_ids`: only
    these items (what `processbench eval --upstream` asks about); `fingerprint`: the release's
    (pipeline/release/identity.py release_fingerprint), recorded in the report as `release_fingerprint`.

    Returns {"sources": {slug: {"items", "ok", "missing", "differs", "unverified"}}, "files": {release file:
    {"items", "ok", "missing", "differs", "unverified", "images"}} (every eval level and SFT), "images_written": n,
    "problems": [{item_id, source, unit_id, camera, status, reason}, ...]} and writes it (path-free) to
    <out_dir>/<frames.reconstruction.report_file>.
    """
    fr = cfg.frames
    rc = fr.reconstruction
    out_dir = Path(out_dir)
    images_dir = out_dir / rc.images_dir
    items = read_release_items(Path(release_dir), cfg)
    present = set(items["file"].to_list())
    selected = sorted(sources) if sources is not None else sorted(upstream)
    items = items.filter(pl.col("source_slug").is_in(selected))
    if item_ids is not None:
        items = items.filter(pl.col("item_id").is_in(sorted(item_ids)))
    readers = AdapterReaders(
        {
            s: (cfg.sources[s].adapter.options() if s in cfg.sources else {}, upstream[s])
            for s in selected
            if s in upstream
        },
        decoder=fr.decoder,
        threads=int(fr.decoder_threads),
    )
    tasks = []
    results: list[dict] = []
    grouped = (
        items.group_by(["source_slug", "source_unit_id", "camera"])
        .agg(pl.struct([*COLUMNS, "first_image"]).sort_by("item_id", "first_image").alias("rows"))
        .sort(["source_slug", "source_unit_id", "camera"])
    )
    for slug, unit_id, camera, rows in grouped.iter_rows():
        task = ReconTask(
            readers,
            slug,
            unit_id,
            camera,
            tuple(
                (r["item_id"], r["frame_indices_json"], r["render_spec_json"], r["image_hashes_json"], r["first_image"])
                for r in rows
            ),
            str(images_dir),
            fr.image.model_dump(),
            int(fr.cache.png_compression),
            fr.decoder,
            int(fr.decoder_threads),
        )
        if slug not in upstream:
            results.extend(_fail(task, f"no upstream root given for {slug}"))
        else:
            tasks.append(task)
    step, bar = (lambda: None), None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc="reconstruct", unit="video")
        step = bar.update
    elif callable(progress):
        done = [0]

        def step() -> None:
            done[0] += 1
            progress(done[0], len(tasks))

    def on_result(res: list[dict]) -> None:
        results.extend(res)
        step()

    run_tasks(
        run_recon,
        tasks,
        fr.workers if workers is None else workers,
        on_result,
        lambda t, reason: _fail(t, reason),
        mp_context=fr.mp_context,
        in_flight_per_worker=fr.in_flight_per_worker,
    )
    if bar is not None:
        bar.close()
    results = _one_per_item(results)
    per_source = {s: {"items": 0, **{k: 0 for k in STATUSES}} for s in selected}
    file_of = dict(zip(items["item_id"].to_list(), items["file"].to_list()))
    per_file = {
        f: {"items": 0, **{k: 0 for k in STATUSES}, "images": 0}
        for f in [*release_item_files(release_dir, cfg), *sorted(present)]
        if f in present
    }
    for r in results:
        per_source[r["source"]]["items"] += 1
        per_source[r["source"]][r["status"]] += 1
        f = per_file[file_of[r["item_id"]]]
        f["items"] += 1
        f[r["status"]] += 1
        f["images"] += r["images"]
    problems = sorted(
        (
            {k: r[k] for k in ("item_id", "source", "unit_id", "camera", "status", "reason")}
            for r in results
            if r["status"] != "ok"
        ),
        key=lambda r: r["item_id"],
    )
    report = {
        **({"release_fingerprint": fingerprint} if fingerprint else {}),
        "sources": per_source,
        "files": per_file,
        "images_written": sum(r["images"] for r in results),
        "problems": problems,
    }
    write_json(out_dir / rc.report_file, report)
    return report


def _one_per_item(results: list[dict]) -> list[dict]:
    """One result per item: a step item's parts (one per step) merge, the first part not ok (by image order) giving
    the status, the images summed."""
    out: dict[str, dict] = {}
    for r in results:
        if r["item_id"] not in out:
            out[r["item_id"]] = dict(r)
            continue
        have = out[r["item_id"]]
        have["images"] += r["images"]
        if have["status"] == "ok" and r["status"] != "ok":
            have.update({k: r[k] for k in ("status", "reason", "unit_id", "camera")})
    return list(out.values())


def _size_policy_text(fr: dict) -> str:
    max_side = fr.image.max_side
    if not max_side:
        return "shown at their native decoded size"
    return (
        f"downscaled with OpenCV INTER_AREA so that the longer side is at most {max_side} px (aspect ratio kept, "
        f"sizes rounded to the nearest pixel, never upscaled)"
    )


def reconstruction_markdown(cfg: Settings) -> str:
    """metadata/reconstruction.md: generated from the configs, path-free, deterministic."""
    fr = cfg.frames
    rc = fr.reconstruction
    srcs = cfg.sources
    slugs = list(cfg.build.sources or sorted(srcs))
    files = cfg.release.files
    images_dir = rc.images_dir
    report_file = rc.report_file
    lines = [
        "# Reconstructing the images behind each item",
        "",
        "No frames or images are redistributed with this release. Every row names its frames by path-free keys, and",
        "anyone who holds the upstream data can rebuild the exact images a model is shown and check them pixel for",
        "pixel against the hashes published in the row.",
        "",
        "## Keys in each row",
        "",
        "| column | meaning |",
        "|---|---|",
        "| `source_slug` | the upstream source (" + ", ".join(f"`{s}`" for s in slugs) + ") |",
        "| `source_task_id`, `source_unit_type`, `source_unit_id` | the upstream task and isolation unit (episode or recording) |",
        "| `camera` | the camera stream the frames come from |",
        "| `frame_indices_json` | JSON list of frame indices, in display order. Frame *i* is the *i*-th frame of the camera stream in presentation order (for video: the *i*-th smallest packet timestamp; for per-row image storage: row *i*) |",
        "| `display_labels_json` | the labels drawn on the images (T8: X, Y, Z; T9: X, Y), else null |",
        "| `render_spec_json` | how the images are drawn (below); null for items shown as plain frames |",
        "| `image_hashes_json` | JSON list with one sha256 per image shown to the model, in order |",
        "| `reconstruction_key_json` | the same keys as one compact JSON object |",
        "| `visual_ref` | `{slug}/{unit_type}/{unit_id}/{camera}/frames[{6-digit indices, comma-separated}]` |",
        "",
        "## Upstream data",
        "",
        "Obtain each source from its publisher (licences differ per source; see the dataset card) and pass the folder",
        "named below as `--upstream <slug>=PATH`:",
        "",
        "| slug | source | dataset | folder to pass | where the frames are |",
        "|---|---|---|---|---|",
    ]
    for slug in slugs:
        info = rc.sources.get(slug, ReconstructionSource())
        name = srcs[slug].name if slug in srcs else slug
        lines.append(f"| `{slug}` | {name} | {info.dataset} | {info.root} | {info.frames} |")
    example = " ".join(f"--upstream {s}=PATH" for s in slugs)
    lines += [
        "",
        "## Command",
        "",
        "```text",
        f"processbench reconstruct --release DIR {example} [--out DIR]",
        "```",
        "",
        "`DIR` is this release folder: it reads every release table (`" + files.eval_parquet + "`, each eval",
        "level's file listed in `" + files.split_summary + "` `eval_levels`, and `" + files.sft_parquet + "`) and",
        "prints per table how many items it rebuilt, verified and wrote, and the folder the images went to.",
        "Give only the sources you hold; items of the others are skipped. For each video (source, unit, camera) the",
        "tool decodes exactly the referenced frames once, through the same source adapter the build used, renders",
        "each item's images, and writes them as lossless PNG to",
        f"`{images_dir}/<item_id>_<k>.png` (k = 0-based position of the image in the item) under `--out`, with a",
        f"per-item report in `{report_file}`.",
        "",
        "Video frames are decoded frame-exactly with PyAV: the packet timestamps are indexed once, the decoder seeks to",
        "the last keyframe at or before the wanted frame and accepts a frame only when its timestamp equals the target",
        "(retrying from the previous keyframe when an open-GOP keyframe's leading pictures are dropped), so H.264 with",
        "B-frames, open-GOP HEVC and AV1 all give the same frames. Use the pinned package versions of the build",
        "(`requirements.lock`): decoders and the OpenCV resize can change pixels between versions.",
        "",
        "## How the images are rendered",
        "",
        f"- **Plain items** (`render_spec_json` null): one image per frame in `frame_indices_json` order, {_size_policy_text(fr)}.",
        "- **`render_spec_json`** (compact JSON) fully describes the labelled images:",
        "  - `version`: 1; `kind`: `labelled_frames` (T8: one image per frame) or `panels` (T9: one composite).",
        "  - `frame_indices`, `labels`: the frames in display order and the label drawn on each.",
        "  - `size`: `[w, h]` each frame is resized to (OpenCV INTER_AREA), or null for the native size.",
        "  - `gap` (panels only): pixels between panels, which are placed left to right in spec order on a white",
        "    canvas (`gap_color`, default white); a shorter panel is padded at the bottom.",
        "  - `label`: `font` (an OpenCV Hershey font, e.g. `HERSHEY_SIMPLEX`), `scale`, `thickness`, `color` and",
        "    `background` (RGB), `position` (`top_left`), `margin`: the label is drawn with `cv2.putText` (LINE_8, no",
        "    anti-aliasing) on a filled background box whose top-left corner is `margin` px from the image's top-left",
        "    corner and which pads the text by `margin // 2` px on every side.",
        "",
        "## How the hashes are checked",
        "",
        'Each entry of `image_hashes_json` is `sha256("<height>x<width>x3|uint8|" + RGB pixel bytes)` of one image:',
        "the decoded, resized and labelled pixels in row-major RGB order, not the bytes of any image file, so the",
        "check does not depend on the PNG/JPEG encoder. The tool reports per source how many items are",
        "",
        "- `ok`: every image matches its hash (written),",
        "- `missing`: the unit, the camera or a frame could not be read from the given upstream folder (not written),",
        "- `differs`: decoded, but the pixels differ from the release (not written; usually a different upstream",
        "  version of the file or a different decoder build),",
        "- `unverified`: the row carries no hashes (written).",
        "",
        f"Frame decoder: `{video.DECODER_VERSION}`; renderer version {RENDER_VERSION}.",
        "",
    ]
    return "\n".join(lines)


def reconstruct_summary(report: dict, out: Path, cfg: Settings) -> str:
    """What `reconstruct` wrote, per release file and per source, where the images went and where the report is."""
    rc = cfg.frames.reconstruction

    def counts(r: dict) -> str:
        extra = ", ".join(f"{r[k]} {k}" for k in ("missing", "differs", "unverified") if r.get(k))
        return f"{r['items']} items: {r['ok']} ok" + (f", {extra}" if extra else "")

    width = max((len(f) for f in report["files"]), default=0)
    lines = [f"release fingerprint: {report['release_fingerprint']}"] if report.get("release_fingerprint") else []
    lines += ["reconstructed, per release file:"]
    lines += [f"  {f:<{width}}  {counts(r)}; {r['images']} images written" for f, r in report["files"].items()]
    lines += ["per source:"] + [f"  {s}: {counts(r)}" for s, r in sorted(report["sources"].items())]
    lines += [f"{report['images_written']} images in {out / rc.images_dir}", f"per-item report: {out / rc.report_file}"]
    if report["problems"]:
        lines.append(f"{len(report['problems'])} item(s) not rebuilt or not verified: see the report's `problems`")
    return "\n".join(lines)
