"""The items an eval run asks, in item-id order: the release's eval tables of the chosen levels and tracks, filtered.

- `mcq` (multiple choice, T1-T12): the model-facing prompt and image references the exports show
  (pipeline/exports/common.py `model_rows`: the one place the prompt of a release row is built);
- `steps` (the T13 step track, pipeline/steps/): the row's own `prompt` (one `<image>` tag per image, each step's
  frames beside its sentence) and its `image` references; a release without step files has no step items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.scoring.circular import base_id, circular_rows
from pipeline.exports.common import model_rows
from pipeline.release.prompts import resolve_task_id
from pipeline.release.files import eval_level_files

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


TRACKS = ("mcq", "steps")
IMAGE_TAG = "<image>"  # where a step prompt shows an image (pipeline/steps/rows.py)


@dataclass(frozen=True)
class EvalItem:
    item_id: str
    level: str
    task_id: str
    source: str
    prompt: str
    images: tuple[str, ...]  # relative to the --images folder (images/<item_id>_<k>.png)
    image_hashes: tuple[str, ...] | None  # pixel sha256 per image (image_hashes_json), None when the row has none
    prompt_version: str
    track: str = "mcq"
    item_uid: str | None = None  # the item's identity across builds (None: a release without it)
    num_steps: int | None = None  # a step item's step count


def _split_list(arg: str | None) -> list[str]:
    return [x.strip() for x in (arg or "").split(",") if x.strip()]


def parse_tracks(arg: str | None) -> tuple[str, ...]:
    chosen = _split_list(arg) or list(TRACKS)
    unknown = [t for t in chosen if t not in TRACKS]
    if unknown:
        raise ValueError(f"--tracks: unknown track {unknown}; the tracks are {', '.join(TRACKS)}")
    return tuple(t for t in TRACKS if t in chosen)


def _families(families: str | None, cfg: Settings) -> tuple[list[str] | None, list[str] | None]:
    """(multiple-choice task ids, step task ids) that --families names; (None, None) without it."""
    fams = _split_list(families)
    if not fams:
        return None, None
    mcq, steps = set(), set()
    for f in fams:
        step = next((t for t, st in cfg.step_tasks.items() if f.lower() in (t.lower(), st.task_name.lower())), None)
        if step is not None:
            steps.add(step)
            continue
        try:
            mcq.add(resolve_task_id(f, cfg))
        except KeyError as exc:
            raise ValueError(f"--families: {exc.args[0]}") from None
    return sorted(mcq), sorted(steps)


def _uid(r: dict) -> str | None:
    return r.get("item_uid") or None


def _mcq_items(release_dir: Path, cfg: Settings, levels: list[str], families, sources, circular) -> list[EvalItem]:
    tables = eval_level_files(release_dir, cfg)
    chosen = levels or list(tables)
    unknown = [lv for lv in chosen if lv not in tables]
    if unknown:
        raise ValueError(f"release {release_dir.name}: no eval level {unknown}; it has {list(tables)}")
    frames = []
    for lv in chosen:
        path = release_dir / tables[lv]
        if not path.is_file():
            raise FileNotFoundError(f"release {release_dir.name}: missing {tables[lv]} (eval level {lv})")
        frames.append(pl.read_parquet(path).with_columns(pl.lit(lv).alias("_level")))
    df = pl.concat(frames, how="vertical_relaxed")
    if families is not None:
        df = df.filter(pl.col("task_id").is_in(families))
    if sources:
        df = df.filter(pl.col("source_slug").is_in(sources))
    if df["item_id"].n_unique() != df.height:
        raise ValueError(f"release {release_dir.name}: an item id appears in two eval files")
    level_of = dict(zip(df["item_id"].to_list(), df["_level"].to_list()))
    if circular:  # MMBench's CircularEval: every item once per rotation of its options, asked as `<item_id>.c<k>`
        df = circular_rows(df.sort("item_id"))
    out = []
    for m in model_rows(df.drop("_level"), cfg):
        r = m.row
        hashes = json.loads(r["image_hashes_json"]) if r.get("image_hashes_json") else None
        out.append(
            EvalItem(
                r["copy_id"] if circular else r["item_id"],
                level_of[r["item_id"]],
                r["task_id"],
                r["source_slug"],
                m.prompt,
                tuple(m.images),
                tuple(hashes) if hashes is not None else None,
                str(r["prompt_version"]),
                "mcq",
                _uid(r) if not circular else (f"{_uid(r)}.c{r['circular_k']}" if _uid(r) else None),
            )
        )
    return out


def _step_items(release_dir: Path, cfg: Settings, levels: list[str], families, sources) -> list[EvalItem]:
    from pipeline.release.files import STEP_LEVELS, step_files

    found = step_files(cfg, release_dir)
    parts = [p for p in found if p != "sft" and (not levels or p in levels)]
    unknown = [lv for lv in levels if lv not in STEP_LEVELS]
    if unknown and found:
        raise ValueError(f"release {release_dir.name}: no eval level {unknown}")
    out = []
    for part in parts:
        df = pl.read_parquet(release_dir / found[part][0])
        if families is not None:
            df = df.filter(pl.col("task_id").is_in(families))
        if sources:
            df = df.filter(pl.col("source_slug").is_in(sources))
        for r in df.iter_rows(named=True):
            out.append(
                EvalItem(
                    r["item_id"],
                    part,
                    r["task_id"],
                    r["source_slug"],
                    r["prompt"],
                    tuple(r["image"]),
                    tuple(json.loads(r["image_hashes_json"])) if r.get("image_hashes_json") else None,
                    str(r["prompt_version"]),
                    "steps",
                    _uid(r),
                    int(r["num_steps"]),
                )
            )
    return out


def load_items(
    release_dir: Path,
    cfg: Settings,
    levels: str | None = None,
    families: str | None = None,
    sources: str | None = None,
    limit: int | None = None,
    circular: bool = False,
    tracks: tuple[str, ...] | str | None = None,
) -> list[EvalItem]:
    """The selected eval items of the chosen tracks (default both), sorted by item id (`limit`: the first N of them;
    a CircularEval copy goes with its item). Unknown levels, families, sources or tracks are errors (ValueError naming
    what exists), never an empty run."""
    release_dir = Path(release_dir)
    tracks = parse_tracks(tracks) if tracks is None or isinstance(tracks, str) else tuple(tracks)
    lvls = _split_list(levels)
    mcq_fams, step_fams = _families(families, cfg)
    srcs = _split_list(sources)
    items: list[EvalItem] = []
    if "mcq" in tracks and (mcq_fams is None or mcq_fams):
        items += _mcq_items(release_dir, cfg, lvls, mcq_fams, srcs, circular)
    if "steps" in tracks and (step_fams is None or step_fams):
        items += _step_items(release_dir, cfg, lvls, step_fams, srcs)
    missing = [s for s in srcs if s not in {it.source for it in items}]
    if missing:
        raise ValueError(f"--sources: no eval items of {missing} in the chosen levels, families and tracks")
    items.sort(key=lambda it: (base_id(it.item_id), it.item_id))
    if limit is not None:
        keep = []
        for it in items:
            if base_id(it.item_id) not in keep[-1:]:
                keep.append(base_id(it.item_id))
        wanted = set(keep[: max(0, int(limit))])
        items = [it for it in items if base_id(it.item_id) in wanted]
    return items


def check_prompt_version(items: list[EvalItem], cfg: Settings) -> None:
    """The multiple-choice prompts are built by this code from the release rows, the step prompts parsed by it: a
    release made under another prompt protocol would be asked or read with prompts it never showed: refuse."""
    theirs = sorted({(it.track, it.task_id if it.track == "steps" else "", it.prompt_version) for it in items})
    for track, task, version in theirs:
        ours = cfg.step_tasks[task].prompt_version if track == "steps" else cfg.release.prompt_version
        if version != ours:
            raise ValueError(
                f"the release's {track} prompt_version is {version!r}, this code's is {ours!r}: use the "
                f"processbench version that built the release"
            )
