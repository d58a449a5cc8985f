"""The release's step files (configs/release.yaml `files`: steps_eval_parquet, steps_sft_parquet, ...) and their
reader. A release without them, or a configuration without the keys, has no step track: `step_files` (their names,
pipeline/release/files.py) gives {} and every caller skips the track.

    absent_step_track(root, files) -> the step file keys the validator does not require (all, when none is there)
    read_step_tables(release_dir, cfg) -> {"eval": every level's rows, "sft": the SFT rows} | None
    step_rows(df) -> one row per step: item, cell, split group, position, gold label, error kind
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

import polars as pl

from pipeline.release.files import step_files

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

STEP_FILE_KEYS = ("steps_eval_parquet", "steps_eval_jsonl", "steps_sft_parquet", "steps_sft_jsonl", "steps_manifest")


def absent_step_track(root: Path, files: dict[str, str]) -> set[str]:
    """The step file keys a release may lack: all of them when none of its step files is there (a release without the
    step track), none when any is (then every step file must be there)."""
    keys = {k for k in STEP_FILE_KEYS if k in files}
    return keys if not any((Path(root) / files[k]).is_file() for k in keys) else set()


NATURAL_PREFIX = "natural_"  # error kinds starting with it come from the sources' own failure annotations


# what the scorer and the gates read of a step row (step_rows): the rest (prompts, images, keys) only costs memory
SCORE_COLUMNS = (
    "item_id",
    "source",
    "source_slug",
    "eval_level",
    "split_group_id",
    "num_steps",
    "response",
    "step_error_kinds_json",
)


def read_step_tables(release_dir: Path, cfg: Settings, columns=SCORE_COLUMNS) -> dict[str, pl.DataFrame] | None:
    """Every eval level's step rows (L1 first) and the SFT step rows (empty when the SFT file is absent), `columns`
    of them (None: all); None without step files."""
    found = step_files(cfg, release_dir)
    if not found:
        return None
    root = Path(release_dir)
    cols = list(columns) if columns is not None else None
    ev = pl.concat(
        [pl.read_parquet(root / pq, columns=cols) for part, (pq, _) in found.items() if part != "sft"],
        how="vertical_relaxed",
    )
    sf = pl.read_parquet(root / found["sft"][0], columns=cols) if "sft" in found else ev.clear()
    return {"eval": ev, "sft": sf}


def level_of(row: dict) -> str:
    return "none" if row.get("eval_level") is None else str(row["eval_level"])


def kind_class(kind: str | None) -> str | None:
    """natural / injected of an error kind (None for a step that is not wrong)."""
    if kind is None:
        return None
    return "natural" if kind.startswith(NATURAL_PREFIX) else "injected"


def error_class(kind: str | None) -> str | None:
    """The class of wrong step the per-class gates score alone: "natural" for every natural_* kind (the sources'
    own failure records), else the injected kind itself (None for a step that is not wrong)."""
    if kind is None:
        return None
    return "natural" if kind.startswith(NATURAL_PREFIX) else kind


def step_rows(df: pl.DataFrame) -> list[dict]:
    """One dict per step of every item of a step table: item_id, source, source_slug, level, split_group_id,
    position (0-based), num_steps, sentence, previous and next sentence (None at the ends), gold (1 / -1 / 0),
    kind (error kind or None)."""
    out = []
    cols = ["item_id", "source", "source_slug", "eval_level", "split_group_id", "response", "step_error_kinds_json"]
    for r in df.select([c for c in cols if c in df.columns]).iter_rows(named=True):
        steps = list(r["response"]["steps"])
        gold = [int(g) for g in r["response"]["process_correctness"]]
        kinds = json.loads(r["step_error_kinds_json"]) if r.get("step_error_kinds_json") else [None] * len(steps)
        for i, (sentence, g, kind) in enumerate(zip(steps, gold, kinds)):
            out.append(
                {
                    "item_id": r["item_id"],
                    "source": r["source"],
                    "source_slug": r.get("source_slug"),
                    "level": level_of(r),
                    "split_group_id": r["split_group_id"],
                    "position": i,
                    "num_steps": len(steps),
                    "sentence": sentence,
                    "previous": steps[i - 1] if i else None,
                    "next": steps[i + 1] if i + 1 < len(steps) else None,
                    "gold": g,
                    "kind": kind if g == -1 else None,
                }
            )
    return out
