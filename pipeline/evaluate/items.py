"""The items an eval run asks: the release's eval tables of the chosen levels, filtered, each with the model-facing
prompt and image references the exports show (pipeline/exports/common.py `model_rows`: the one place the prompt of a
release row is built), in item-id order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.scoring.circular import circular_rows
from pipeline.exports.common import model_rows
from pipeline.release.prompts import resolve_task_id
from pipeline.release.files import eval_level_files

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


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


def _split_list(arg: str | None) -> list[str]:
    return [x.strip() for x in (arg or "").split(",") if x.strip()]


def load_items(
    release_dir: Path,
    cfg: Settings,
    levels: str | None = None,
    families: str | None = None,
    sources: str | None = None,
    limit: int | None = None,
    circular: bool = False,
) -> list[EvalItem]:
    """The selected eval items, sorted by item id (`limit`: the first N of them). Unknown levels, families or sources
    are errors (ValueError naming what exists), never an empty run."""
    release_dir = Path(release_dir)
    tables = eval_level_files(release_dir, cfg)
    chosen = _split_list(levels) or list(tables)
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
    fams = _split_list(families)
    if fams:
        try:
            wanted = sorted({resolve_task_id(f, cfg) for f in fams})
        except KeyError as exc:
            raise ValueError(f"--families: {exc.args[0]}") from None
        df = df.filter(pl.col("task_id").is_in(wanted))
    srcs = _split_list(sources)
    if srcs:
        have = sorted(set(df["source_slug"].to_list()))
        missing = [s for s in srcs if s not in have]
        if missing:
            raise ValueError(f"--sources: no eval items of {missing} in the chosen levels; sources there: {have}")
        df = df.filter(pl.col("source_slug").is_in(srcs))
    df = df.sort("item_id")
    if df["item_id"].n_unique() != df.height:
        raise ValueError(f"release {release_dir.name}: an item id appears in two eval files")
    if limit is not None:
        df = df.head(max(0, int(limit)))
    level_of = dict(zip(df["item_id"].to_list(), df["_level"].to_list()))
    if circular:  # MMBench's CircularEval: every item once per rotation of its options, asked as `<item_id>.c<k>`
        df = circular_rows(df)
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
            )
        )
    return out


def check_prompt_version(items: list[EvalItem], cfg: Settings) -> None:
    """The prompts are built by this code from the release rows; a release made under another prompt protocol would
    be asked with prompts it never showed: refuse."""
    ours = cfg.release.prompt_version
    theirs = sorted({it.prompt_version for it in items})
    if theirs and theirs != [ours]:
        raise ValueError(
            f"the release's prompt_version is {theirs}, this code builds prompts of {ours!r}: use the "
            f"processbench version that built the release"
        )
