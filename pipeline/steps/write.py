"""The step track's release files (configs/release.yaml `files.steps_*`): eval per level (L1 under the plain name,
L2/L3 as `_L2`/`_L3`, as the MCQ eval files) and SFT, parquet + jsonl with the same rows, and a manifest.

    rels = write_step_files(rows, summary, cfg, release_dir)   # release-relative names written
    step_tables(release_dir, cfg)                              # {release-relative parquet: table}, every level + SFT
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

import polars as pl

from pipeline.core import io
from pipeline.core.leaks import find_path_leaks
from pipeline.release.files import STEP_LEVELS, file_names, step_files
from .rows import STEP_SCHEMA, row_problems

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


def _file_tables(rows: pl.DataFrame, cfg: Settings) -> dict[str, tuple[str, pl.DataFrame]]:
    """{parquet name: (jsonl name, rows)} (names from pipeline/release/files.py step_files): the main eval file (L1, and rows without a
    level) always, each other level's file that has rows, and SFT."""
    names = step_files(cfg)
    ev = rows.filter(pl.col("split") == "eval")
    unknown = sorted(set(ev["eval_level"].drop_nulls().to_list()) - set(STEP_LEVELS))
    if unknown:
        raise ValueError(
            f"step rows of eval levels without a step file: {unknown} (pipeline/release/files.py STEP_LEVELS)"
        )
    out = {}
    for lv in STEP_LEVELS:
        part = (
            ev.filter(pl.col("eval_level").is_null() | (pl.col("eval_level") == lv))
            if lv == "L1"
            else ev.filter(pl.col("eval_level") == lv)
        )
        if lv == "L1" or part.height:
            out[names[lv][0]] = (names[lv][1], part.sort("item_id"))
    out[names["sft"][0]] = (names["sft"][1], rows.filter(pl.col("split") == "sft").sort("item_id"))
    return out


def manifest(tables: dict, summary: dict, cfg: Settings) -> dict:
    return {
        "task_id": "T13",
        "files": {
            pq: {
                "jsonl": jl,
                "items": df.height,
                "steps": int(df["num_steps"].sum() or 0),
                "split_groups": df["split_group_id"].n_unique(),
            }
            for pq, (jl, df) in sorted(tables.items())
        },
        "sources": summary.get("counts", {}),
    }


def write_step_files(rows: pl.DataFrame, summary: dict, cfg: Settings, out_dir: Path) -> list[str]:
    """Check every row against the contract (rows.row_problems) and the isolation (no group on both sides), scan
    the text for path leaks, then write the files atomically."""
    if list(rows.schema.items()) != list(STEP_SCHEMA.items()):
        raise ValueError("step rows do not have the step schema (pipeline/steps/rows.py STEP_SCHEMA)")
    problems = [p for r in rows.iter_rows(named=True) for p in row_problems(r)]
    if problems:
        raise ValueError(f"step rows break the row contract: {problems[:5]}")
    sides = rows.group_by("split_group_id").agg(pl.col("split").n_unique().alias("n")).filter(pl.col("n") > 1)
    if sides.height:
        raise ValueError(f"step split groups on both sides: {sides['split_group_id'].to_list()[:5]}")
    tables = _file_tables(rows, cfg)
    mirrors = {jl: io.jsonl_bytes(df) for jl, df in tables.values()}
    text = io.dumps_json(manifest(tables, summary, cfg))
    leaks = {rel: f for rel, b in mirrors.items() if (f := find_path_leaks(b.decode("utf-8")))}
    if leaks:
        raise ValueError(f"path or identity leaks in step files: {leaks}")
    for pq, (jl, df) in tables.items():
        io.write_parquet(Path(out_dir) / pq, df)
        io.atomic_write_bytes(Path(out_dir) / jl, mirrors[jl])
    io.atomic_write_text(Path(out_dir) / file_names(cfg)["steps_manifest"], text)
    return sorted([*tables, *(jl for jl, _ in tables.values()), file_names(cfg)["steps_manifest"]])


def step_tables(release_dir: Path, cfg: Settings) -> dict[str, pl.DataFrame]:
    """Every step file of a written release (its manifest names them), read back."""
    path = Path(release_dir) / file_names(cfg)["steps_manifest"]
    if not path.is_file():
        return {}
    names = sorted(json.loads(path.read_text(encoding="utf-8"))["files"])
    return {rel: pl.read_parquet(Path(release_dir) / rel) for rel in names if (Path(release_dir) / rel).is_file()}


def step_problems(release_dir: Path, cfg: Settings, mcq_groups: dict[str, set[str]]) -> list[str]:
    """What the validator finds in the step files: a file the manifest lists missing, a schema other than the step
    schema, a row against the contract, a jsonl mirror that differs from its parquet, a row in the wrong file, a split
    group on both sides (within the step track, or across the two tracks: `mcq_groups` = {split: groups})."""
    root = Path(release_dir)
    path = root / file_names(cfg)["steps_manifest"]
    if not path.is_file():  # a release without the step track (none of its files), or one that lost its manifest
        present = [rel for key, rel in file_names(cfg).items() if key.startswith("steps_") and (root / rel).is_file()]
        return [f"{file_names(cfg)['steps_manifest']}: missing, but {present} are there"] if present else []
    out, sides = [], {}
    listed = json.loads(path.read_text(encoding="utf-8"))["files"]
    for rel, meta in sorted(listed.items()):
        if not (root / rel).is_file() or not (root / meta["jsonl"]).is_file():
            out.append(f"{rel}: listed in the steps manifest but missing (or its jsonl {meta['jsonl']})")
            continue
        df = pl.read_parquet(root / rel)
        if list(df.schema.items()) != list(STEP_SCHEMA.items()):
            out.append(f"{rel}: not the step schema (pipeline/steps/rows.py STEP_SCHEMA)")
            continue
        if io.jsonl_bytes(df) != (root / meta["jsonl"]).read_bytes():
            out.append(f"{meta['jsonl']}: does not hold the rows of {rel}")
        if df.height != meta["items"]:
            out.append(f"{rel}: {df.height} rows, the manifest says {meta['items']}")
        split = "sft" if rel == file_names(cfg)["steps_sft_parquet"] else "eval"
        if df.height and set(df["split"].to_list()) != {split}:
            out.append(f"{rel}: holds rows of another split than {split}")
        out += [f"{rel}: {p}" for r in df.iter_rows(named=True) for p in row_problems(r)]
        for g in df["split_group_id"].to_list():
            sides.setdefault(g, set()).add(split)
    both = sorted(g for g, s in sides.items() if len(s) > 1)
    other = {"eval": "sft", "sft": "eval"}
    across = sorted({g for g, s in sides.items() for side in s if g in mcq_groups.get(other[side], set())})
    out += [f"step split group {g}: on both sides" for g in both[:10]]
    out += [
        f"split group {g}: on one side in the step files, on the other in the multiple-choice files"
        for g in across[:10]
    ]
    return out


def step_recon_rows(release_dir: Path, cfg: Settings) -> pl.DataFrame:
    """What `processbench reconstruct` needs of the step items: one row per (item, step) with the step's unit,
    camera, frames and image hashes, `first_image` = the index of the step's first image in the item (the image
    files are <item_id>_<k>.png, as the rows' `image` list names them), and `file`."""
    cols = {
        "item_id": pl.String,
        "source_slug": pl.String,
        "source_unit_id": pl.String,
        "camera": pl.String,
        "frame_indices_json": pl.String,
        "render_spec_json": pl.String,
        "image_hashes_json": pl.String,
        "file": pl.String,
        "first_image": pl.Int64,
    }
    rows = []
    for rel, df in step_tables(release_dir, cfg).items():
        for r in df.select(
            "item_id", "source_slug", "step_reconstruction_keys_json", "step_image_index_json", "image_hashes_json"
        ).iter_rows(named=True):
            hashes = json.loads(r["image_hashes_json"])
            for key, index in zip(
                json.loads(r["step_reconstruction_keys_json"]), json.loads(r["step_image_index_json"])
            ):
                rows.append(
                    {
                        "item_id": r["item_id"],
                        "source_slug": r["source_slug"],
                        "source_unit_id": key["source_unit_id"],
                        "camera": key["camera"],
                        "frame_indices_json": io.compact_json(key["frame_indices"]),
                        "render_spec_json": None,
                        "image_hashes_json": io.compact_json([hashes[i] for i in index]),
                        "file": rel,
                        "first_image": index[0],
                    }
                )
    return pl.DataFrame(rows, schema=cols)
