"""`processbench split`: split any item pool file (jsonl) with the build's policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

import polars as pl

from pipeline.core.io import atomic_write_text, compact_json, write_json
from pipeline.release.schema import CHOICE_LETTERS
from .assign import split_items
from .groups import build_groups
from .policy import UNIT_KEYS, load_policy

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


def _row_sort_key(row: dict) -> tuple:
    ident = next((str(row[k]) for k in ("item_key", "item_id", "candidate_key") if row.get(k) is not None), "")
    return (str(row["source"]), str(row["split_group_id"]), ident, compact_json(row))


def split_pool_file(
    items_jsonl: Path, out_dir: Path, config_file: Path | None = None, cfg: Settings | None = None
) -> dict:
    """Split any item pool: rows need source, task_id, split_group_id (everything else passes through; `answer` letters
    enable the letter term). Writes out_dir/eval.jsonl, sft.jsonl (rows + split, sorted, canonical compact JSON) and
    split_summary.json; returns the summary."""
    policy, seed = load_policy(config_file, cfg)
    rows: list[dict] = []
    with open(items_jsonl, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            lack = [k for k in ("source", "task_id", "split_group_id") if row.get(k) in (None, "")]
            if lack:
                raise ValueError(f"{Path(items_jsonl).name} line {n}: missing {', '.join(lack)}")
            rows.append(row)
    cols: dict[str, list] = {
        "source": [str(r["source"]) for r in rows],
        "task_id": [str(r["task_id"]) for r in rows],
        "split_group_id": [str(r["split_group_id"]) for r in rows],
        "unit_id": [str(r.get("unit_id") or r.get("source_unit_id") or r["split_group_id"]) for r in rows],
        "answer": [
            r.get("answer") if isinstance(r.get("answer"), str) and r.get("answer") in CHOICE_LETTERS else None
            for r in rows
        ],
        "num_choices": [int(r["num_choices"]) if isinstance(r.get("num_choices"), int) else None for r in rows],
    }
    for k in ("source_task_id", *UNIT_KEYS[1:]):
        if any(r.get(k) is not None for r in rows):
            cols[k] = [None if r.get(k) is None else str(r[k]) for r in rows]
    frame = pl.DataFrame(cols, schema={k: (pl.Int64 if k == "num_choices" else pl.String) for k in cols})
    # the rows' split_group_id is the isolation unit; units sharing an isolation key of the policy merge as in the build
    frame = frame.with_row_index("__line").with_columns(pl.col("split_group_id").alias("unit_id"))
    fields = [c for c in ("source_task_id", *UNIT_KEYS[1:]) if c in frame.columns]
    units = (
        frame.group_by("source", "unit_id")
        .agg([pl.col(c).drop_nulls().first() for c in fields])
        .rename({"source_task_id": "task_id"} if "source_task_id" in fields else {})
    )
    out, summary = split_items(frame, build_groups(frame, units, policy), policy, seed)
    by_split: dict[str, list[dict]] = {"eval": [], "sft": []}
    has_level = "eval_level" in out.columns
    for rec in out.select("__line", "split", *(["eval_level"] if has_level else [])).iter_rows(named=True):
        row = dict(rows[rec["__line"]])
        row["split"] = rec["split"]
        if has_level:
            row["eval_level"] = rec["eval_level"]
        by_split[rec["split"]].append(row)
    out_dir = Path(out_dir)
    for name, part in by_split.items():
        part.sort(key=_row_sort_key)
        atomic_write_text(out_dir / f"{name}.jsonl", "".join(compact_json(r) + "\n" for r in part))
    write_json(out_dir / "split_summary.json", summary)
    return summary
