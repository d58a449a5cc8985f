"""The release writers: the eval/SFT tables (built by `pipeline/release/rows.py` from ITEMS after the split and the IR
units) -> the release folder (parquet + jsonl mirrors, metadata, checksums), deterministic to the byte.

    eval_df, sft_df = release_tables(items, units, cfg)
    written = write_release(eval_df, sft_df, split_summary, cfg, Path("release"), documents)

Row order and item ids: see pipeline/release/rows.py. Files keep that order (= sorted by item_id).

Everything written comes from the two tables, the configs and the inputs handed in; there are no timestamps,
host names, user names or absolute paths, and every file name comes from configs/release.yaml `files`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import io as _stdio
from collections import Counter
from pathlib import Path

import polars as pl

from pipeline.core import io
from pipeline.core.leaks import find_path_leaks
from pipeline.release import quotas as quotas_mod
from pipeline.release.schema import CHOICE_LETTERS  # noqa: F401 - re-exported (pipeline/scoring/mcq.py reads writers.CHOICE_LETTERS)
from pipeline.release.schema import COLUMN_NAMES, polars_schema, schema_markdown
from pipeline.release.files import merge_checked as _merge
from pipeline.release.files import plain_json as _plain
from pipeline.release.files import (  # noqa: F401 - re-exported: writers.file_names etc. stay valid
    file_names,
    level_file_names,
    release_files_on_disk,
    schema_source_names,
    sha256_file,
    source_names,
    source_order,
    FORBIDDEN_KEYS,
    task_number,
    write_checksums,
)
from pipeline.release.rows import (  # noqa: F401 - re-exported: the tables these writers write
    HEX64,
    REQUIRED_ITEM_COLUMNS,
    REQUIRED_UNIT_COLUMNS,
    SPLITS,
    release_tables,
)

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


# ---------------------------------------------------------------- derived metadata


def _fmt(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}"


def _task_sorted(d: dict) -> dict:
    return dict(sorted(d.items(), key=lambda kv: task_number(kv[0])))


def _counts(df: pl.DataFrame, col: str) -> dict:
    return dict(Counter(df.get_column(col).to_list()))


def random_baselines(df: pl.DataFrame, decimals: int) -> dict[str, float]:
    """Per task: expected accuracy of a uniform random guess = mean over items of 1/num_choices."""
    out = {}
    for task in sorted(set(df.get_column("task_id").to_list()), key=task_number):
        nc = df.filter(pl.col("task_id") == task).get_column("num_choices").to_list()
        out[task] = round(sum(1.0 / n for n in nc) / len(nc), decimals)
    return out


def majority_baselines(df: pl.DataFrame, decimals: int) -> dict[str, float]:
    """Per task: share of the most frequent answer letter (always answering that letter)."""
    out = {}
    for task in sorted(set(df.get_column("task_id").to_list()), key=task_number):
        answers = df.filter(pl.col("task_id") == task).get_column("answer").to_list()
        out[task] = round(max(Counter(answers).values()) / len(answers), decimals)
    return out


TASK_DISTRIBUTION_HEADER = (
    "task_id",
    "task_name",
    "eval_n",
    "num_choices",
    "random_acc",
    "majority_acc",
    "label_prior_acc",
    "label_prior_answer",
    *quotas_mod.CSV_COLUMNS,
)


def task_distribution_csv(eval_df: pl.DataFrame, cfg: Settings, quotas=()) -> str:
    """metadata/task_distribution.csv: one row per task present in eval, in task order. num_choices is the single
    value of the task, or its distinct values joined by '|' when a task mixes them; floats with fixed decimals.
    The last columns (`delivered`, `quota`, `shortfall_reason`) sum the task's quota cells (`quotas`,
    pipeline/release/quotas.py) over its sources; a task with cells but no eval row here (the T13 step track) gets a
    row of its own whose eval columns are empty."""
    dec, quotas = int(cfg.release.float_decimals), list(quotas)
    tnames = cfg.task_names() | {t: tpl.task_name for t, tpl in cfg.step_tasks.items()}
    rnd, maj = random_baselines(eval_df, 12), majority_baselines(eval_df, 12)
    buf = _stdio.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(TASK_DISTRIBUTION_HEADER)
    for task in sorted(set(rnd) | set(quotas_mod.csv_tasks(quotas)), key=task_number):
        if task not in rnd:
            w.writerow(
                [task, tnames.get(task, task), "", "", "", "", "", "", *quotas_mod.csv_values(quotas, task, cfg)]
            )
            continue
        sub = eval_df.filter(pl.col("task_id") == task)
        nc = sorted(set(sub.get_column("num_choices").to_list()))
        # majority_acc is the letter prior (kept at random by the letter assignment); the label prior is the share of
        # the most frequent answer text, what a model that ignores the images but knows the labels' frequency scores
        counts = sub.group_by("answer_text").len().sort(["len", "answer_text"], descending=[True, False])
        top, top_n = counts.row(0)
        w.writerow(
            [
                task,
                tnames[task],
                sub.height,
                "|".join(map(str, nc)),
                _fmt(rnd[task], dec),
                _fmt(maj[task], dec),
                _fmt(top_n / sub.height, dec),
                top,
                *quotas_mod.csv_values(quotas, task, cfg),
            ]
        )
    return buf.getvalue()


def _groups(df: pl.DataFrame) -> list[str]:
    return sorted(set(df.get_column("split_group_id").to_list()))


def _task_aliases(frames: list[pl.DataFrame]) -> dict:
    """task_id -> legacy alias (or sorted list of aliases) wherever the legacy id differs from the task id."""
    seen: dict[str, set] = {}
    for df in frames:
        for t, legacy in df.select("task_id", "task_type_legacy").unique().iter_rows():
            seen.setdefault(t, set()).add(legacy)
    out = {}
    for t in sorted(seen, key=task_number):
        vals = sorted(seen[t])
        if vals != [t]:
            out[t] = vals[0] if len(vals) == 1 else vals
    return out


def build_split_summary(eval_df: pl.DataFrame, sft_df: pl.DataFrame, split_summary: dict, cfg: Settings) -> dict:
    """The public split_summary.json shape, computed from the tables, merged with the split stage's own summary."""
    rc = cfg.release
    names = source_names(cfg)
    both = pl.concat([eval_df, sft_df])
    sources = {}
    for slug in names:
        ev = eval_df.filter(pl.col("source_slug") == slug)
        sf = sft_df.filter(pl.col("source_slug") == slug)
        if ev.height + sf.height == 0:
            continue
        unit_types = sorted(
            set(ev.get_column("source_unit_type").to_list() + sf.get_column("source_unit_type").to_list())
        )
        sources[slug] = {
            "name": names[slug],
            "group_unit": "/".join(unit_types),
            "total": ev.height + sf.height,
            "eval": ev.height,
            "sft": sf.height,
            "eval_groups": len(_groups(ev)),
            "sft_groups": len(_groups(sf)),
            "task_counts_total": _task_sorted(_counts(pl.concat([ev, sf]), "task_id")),
            "task_counts_eval": _task_sorted(_counts(ev, "task_id")),
            "task_counts_sft": _task_sorted(_counts(sf, "task_id")),
        }
    total = both.height
    computed = {
        "version": rc.split_version,
        "split_version": rc.split_version,
        "builder_version": rc.builder_version,
        "release_version": rc.release_version,
        "task_aliases": _task_aliases([eval_df, sft_df]),
        "hf_split_names": dict(rc.hf_split_names),
        "total_items": total,
        "eval_items": eval_df.height,
        "sft_items": sft_df.height,
        "eval_groups": len(_groups(eval_df)),
        "sft_groups": len(_groups(sft_df)),
        "eval_share": round(eval_df.height / total, 6) if total else 0.0,
        "task_counts_total": _task_sorted(_counts(both, "task_id")),
        "task_counts_eval": _task_sorted(_counts(eval_df, "task_id")),
        "task_counts_sft": _task_sorted(_counts(sft_df, "task_id")),
        "sources": sources,
    }
    extra = _plain(split_summary or {})
    # Descriptive fields the split stage is the authority on: its words replace the generic ones derived here.
    for slug, src in (extra.get("sources") or {}).items():
        if isinstance(src, dict) and "group_unit" in src and slug in sources:
            del sources[slug]["group_unit"]
    if "seed" not in extra:
        computed["seed"] = cfg.split_seed
    if "eval_ratio" not in extra:
        computed["eval_ratio"] = cfg.split.eval_ratio
    if "split_policy" not in extra:
        computed["split_policy"] = cfg.split.split_policy or (
            "strict isolation by split_group_id: every group (one isolation unit, or units merged by a stricter key) "
            "lies wholly in eval or in sft"
        )
    return _merge(computed, extra)


def build_manifest(
    split: str, df: pl.DataFrame, cfg: Settings, level: str | None = None, warnings=(), quotas=()
) -> dict:
    """A split's manifest; with `level`, the manifest of that eval level's own files. `warnings`: what the build
    recorded in provenance.json (an eval level the corpus could not fill), repeated in every eval manifest;
    `quotas`: provenance.json's quota cells (delivered, quota and why a short one is short, for the whole release),
    repeated in every manifest."""
    rc = cfg.release
    files = file_names(cfg)
    dec = int(rc.float_decimals)
    names = source_names(cfg)
    sources = {}
    for slug in names:
        sub = df.filter(pl.col("source_slug") == slug)
        if sub.height:
            sources[slug] = {
                "name": names[slug],
                "num_items": sub.height,
                "num_groups": len(_groups(sub)),
                "licences": sorted(set(sub.get_column("licence").to_list())),
                "task_counts": _task_sorted(_counts(sub, "task_id")),
            }
    tnames = cfg.task_names()
    tasks = sorted(set(df.get_column("task_id").to_list()), key=task_number)
    manifest = {
        "split": split,
        "hf_split": rc.hf_split_names[split],
        "release_version": rc.release_version,
        "builder_version": rc.builder_version,
        "split_version": rc.split_version,
        "prompt_version": rc.prompt_version,
        "item_id_prefix": rc.item_id_prefix,
        "visual_inputs_redistributed": False,
        "reconstruction_required": True,
        "files": (
            {k: v for k, v in level_file_names(cfg, level).items() if k != "manifest"}
            if level not in (None, "L1")
            else {
                "parquet": files[f"{split}_parquet"],
                "jsonl": files[f"{split}_jsonl"],
                "split_groups": files[f"split_groups_{split}"],
            }
        ),
        "release_files": dict(sorted(files.items())),
        "num_items": df.height,
        "num_groups": len(_groups(df)),
        "columns": list(COLUMN_NAMES),
        "task_names": {t: tnames[t] for t in tasks},
        "task_counts": _task_sorted(_counts(df, "task_id")),
        "random_baselines": random_baselines(df, dec),
        "licences": {slug: s["licences"] for slug, s in sources.items()},
        "sources": sources,
    }
    if split == "eval":
        manifest["majority_baselines"] = majority_baselines(df, dec)
    if level is not None:
        manifest["eval_level"] = level
    if split == "eval" and warnings:
        manifest["warnings"] = list(warnings)
    if quotas:
        manifest["quotas"] = list(quotas)
    return manifest


def eval_level_tables(eval_df: pl.DataFrame) -> dict[str | None, pl.DataFrame]:
    """The eval rows per level: {None: all} without levels, else {"L1": in-distribution, "L2": ..., ...}. L1 (and
    rows without a level) go to the main eval files, every other level to its own files."""
    levels = sorted(set(eval_df.get_column("eval_level").drop_nulls().to_list()))
    if not levels or levels == ["L1"] and not eval_df.get_column("eval_level").null_count():
        return {None: eval_df} if not levels else {"L1": eval_df}
    main = eval_df.filter(pl.col("eval_level").is_null() | (pl.col("eval_level") == "L1"))
    return {"L1": main, **{lv: eval_df.filter(pl.col("eval_level") == lv) for lv in levels if lv != "L1"}}


def eval_levels_summary(tables: dict[str | None, pl.DataFrame], cfg: Settings) -> dict:
    """split_summary.json `eval_levels`: per level its files, items, groups and per-source/family counts."""
    files = file_names(cfg)
    out = {}
    for lv, df in tables.items():
        if lv is None:
            continue
        f = (
            level_file_names(cfg, lv)
            if lv != "L1"
            else {"parquet": files["eval_parquet"], "jsonl": files["eval_jsonl"]}
        )
        out[lv] = {
            "files": {"parquet": f["parquet"], "jsonl": f["jsonl"]},
            "items": df.height,
            "groups": len(_groups(df)),
            "task_counts": _task_sorted(_counts(df, "task_id")),
            "source_counts": {k: v for k, v in sorted(_counts(df, "source_slug").items())},
        }
    return out


# ---------------------------------------------------------------- writing


def _check_table(df: pl.DataFrame, split: str) -> pl.DataFrame:
    if list(df.schema.items()) != list(polars_schema().items()):
        raise ValueError(f"{split} table does not have the release schema (pipeline/release/schema.py)")
    if df.height and set(df.get_column("split").to_list()) != {split}:
        raise ValueError(f"{split} table holds rows of another split")
    return io.sorted_by(df, ["item_id"])  # as release_tables made it, in item_id order: no copy


def write_release(
    eval_df: pl.DataFrame,
    sft_df: pl.DataFrame,
    split_summary: dict,
    cfg: Settings,
    out_dir: Path,
    documents: dict[str, str],
    checksums: bool = True,
    warnings=(),
    quotas=(),
) -> dict:
    """Write the release folder. Every file is written atomically; checksums.sha256 is written last, so an interrupted
    run leaves a release that fails validation instead of one that looks complete (checksums=False: the caller writes
    it once after adding more files, as the release stage does). Returns
    {"files": [relpath, ...] (written here, sorted), "eval_items", "sft_items", "eval_groups", "sft_groups"}.
    `warnings`: the build's recorded warnings (provenance.json's), repeated in the eval manifests; `quotas`: its
    quota cells (provenance.json's, pipeline/release/quotas.py), repeated in every manifest and summed per family in
    task_distribution.csv."""
    out_dir = Path(out_dir)
    rc = cfg.release
    files = file_names(cfg)
    eval_df, sft_df = _check_table(eval_df, "eval"), _check_table(sft_df, "sft")
    both_groups = set(_groups(eval_df)) & set(_groups(sft_df))
    if both_groups:
        raise ValueError(f"{len(both_groups)} split groups in both splits, e.g. {sorted(both_groups)[:3]}")
    wanted_docs = list(rc.documents)
    unknown = sorted(set(documents) - set(wanted_docs))
    missing = [k for k in wanted_docs if k not in documents]
    if unknown or missing:
        raise ValueError(f"documents: unknown keys {unknown}, missing {missing} (configured: {wanted_docs})")

    texts: dict[str, str] = {}
    levels = eval_level_tables(eval_df)
    main_eval = next(iter(levels.values()))
    summary = build_split_summary(eval_df, sft_df, split_summary, cfg)
    if None not in levels:
        summary["eval_levels"] = eval_levels_summary(levels, cfg)
    texts[files["split_summary"]] = io.dumps_json(summary)
    for split, df, lv in (("eval", main_eval, next(iter(levels))), ("sft", sft_df, None)):
        texts[files[f"{split}_manifest"]] = io.dumps_json(build_manifest(split, df, cfg, lv, warnings, quotas))
        texts[files[f"split_groups_{split}"]] = "".join(g + "\n" for g in _groups(df))
    tables = [
        (files["eval_parquet"], files["eval_jsonl"], main_eval),
        (files["sft_parquet"], files["sft_jsonl"], sft_df),
    ]
    for lv, df in levels.items():
        if lv in (None, "L1"):
            continue
        lf = level_file_names(cfg, lv)
        texts[lf["manifest"]] = io.dumps_json(build_manifest("eval", df, cfg, lv, warnings, quotas))
        texts[lf["split_groups"]] = "".join(g + "\n" for g in _groups(df))
        tables.append((lf["parquet"], lf["jsonl"], df))
    texts[files["task_distribution"]] = task_distribution_csv(main_eval, cfg, quotas)
    texts[files["schema"]] = schema_markdown(rc, schema_source_names(cfg))
    for key in wanted_docs:
        texts[files[key]] = documents[key] if documents[key].endswith("\n") else documents[key] + "\n"
    # the jsonl mirrors are made once: scanned here, then written (between them they hold every row)
    mirrors = {jl_rel: io.jsonl_bytes(df) for _, jl_rel, df in tables}
    leaks = {rel: found for rel, t in texts.items() if (found := find_path_leaks(t))}
    leaks |= {rel: found for rel, b in mirrors.items() if (found := find_path_leaks(b.decode("utf-8")))}
    if leaks:
        raise ValueError(f"path or identity leaks in release content: {leaks}")

    for pq_rel, jl_rel, df in tables:
        io.write_parquet(out_dir / pq_rel, df)
        io.atomic_write_bytes(out_dir / jl_rel, mirrors.pop(jl_rel))
    for rel, text in sorted(texts.items()):
        io.atomic_write_text(out_dir / rel, text)
    if checksums:
        write_checksums(out_dir, cfg)
    return {
        "files": sorted([rel for pq, jl, _ in tables for rel in (pq, jl)] + list(texts)),
        "eval_items": eval_df.height,
        "sft_items": sft_df.height,
        "eval_groups": len(_groups(eval_df)),
        "sft_groups": len(_groups(sft_df)),
    }
