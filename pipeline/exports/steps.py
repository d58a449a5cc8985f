"""The step track in the card, Croissant and VisualProcessBench's own layout (docs/steps.md "Exports").

step_configs(release_dir, cfg)    # the card's configs: `process_steps` (what a model may see, plus the gold
                                  # `response` struct and `answer`) and `process_steps_reconstruction`
visualprocessbench_texts(release_dir, cfg)   # [(release-relative jsonl, text)], one file per part
step_record_sets(release_dir, cfg)           # Croissant file objects and record sets of the step files
"""

from __future__ import annotations

import json

from typing import TYPE_CHECKING

from pathlib import Path

import polars as pl

from pipeline.release import writers
from pipeline.exports import common
from pipeline.release.files import level_file_name
from pipeline.steps.rows import STEP_MODEL_FACING, STEP_SCHEMA
from pipeline.steps.write import step_tables

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

STEP_CONFIG = "process_steps"
STEP_RECONSTRUCTION_CONFIG = "process_steps_reconstruction"
# the card's model-facing step config: what a model is shown, and the gold labels (as VisualProcessBench carries them)
STEP_CONFIG_COLUMNS = (*STEP_MODEL_FACING, "response", "answer")
STEP_RECONSTRUCTION_COLUMNS = ("item_id", *(c for c in STEP_SCHEMA if c not in STEP_CONFIG_COLUMNS))
POLICY_MODEL = "robot_records"  # VisualProcessBench's `policy_model`: here the steps come from the sources' records


def step_parts(release_dir: Path, cfg: Settings) -> list[tuple[str, str | None, str, pl.DataFrame]]:
    """(Hugging Face split name, eval level or None, release-relative parquet, rows) per step file with rows: eval
    levels in order (named L1, L2, ... as the MCQ parts), then SFT (`train`)."""
    out = []
    for rel, df in step_tables(release_dir, cfg).items():
        if not df.height:
            continue
        if df["split"][0] == "sft":
            out.append((common.hf_split(cfg, "sft"), None, rel, df))
        else:
            level = df["eval_level"].drop_nulls().first() if df["eval_level"].null_count() < df.height else None
            out.append((level or common.hf_split(cfg, "eval"), level, rel, df))
    return sorted(out, key=lambda p: (p[1] is None and p[0] == common.hf_split(cfg, "sft"), p[0]))


def step_configs(release_dir: Path, cfg: Settings) -> dict[str, dict[str, tuple[str, pl.DataFrame]]]:
    hf_dir = cfg.exports.dir + "/hf"
    parts = step_parts(release_dir, cfg)
    if not parts:
        return {}
    return {
        name: {p[0]: (f"{hf_dir}/{name}/{p[0]}.parquet", p[3].select(cols)) for p in parts}
        for name, cols in (
            (STEP_CONFIG, STEP_CONFIG_COLUMNS),
            (STEP_RECONSTRUCTION_CONFIG, STEP_RECONSTRUCTION_COLUMNS),
        )
    }


def visualprocessbench_rows(df: pl.DataFrame) -> list[dict]:
    """VisualProcessBench's jsonl fields (image: paths relative to the `processbench reconstruct` folder, question,
    answer, response: {steps, process_correctness}, policy_model, data_source) plus the item id and uid."""
    return [
        {
            "id": r["item_id"],
            "item_uid": r["item_uid"],
            "image": list(r["image"]),
            "question": r["question"],
            "answer": r["answer"],
            "response": {
                "steps": list(r["response"]["steps"]),
                "process_correctness": list(r["response"]["process_correctness"]),
            },
            "policy_model": POLICY_MODEL,
            "data_source": r["source"],
        }
        for r in df.select("item_id", "item_uid", "image", "question", "answer", "response", "source").iter_rows(
            named=True
        )
    ]


def visualprocessbench_texts(release_dir: Path, cfg: Settings) -> list[tuple[str, str]]:
    xf = common.export_files(cfg)
    out = []
    for _, level, _, df in step_parts(release_dir, cfg):
        split = df["split"][0]
        rel = (
            level_file_name(xf[f"visualprocessbench_{split}"], level)
            if split == "eval"
            else xf["visualprocessbench_sft"]
        )
        out.append((rel, common.jsonl(visualprocessbench_rows(df))))
    return out


def step_record_sets(release_dir: Path, cfg: Settings, record_set) -> tuple[list[dict], list[dict]]:
    """Croissant file objects and record sets of the step files (`record_set(part, file_id)` is Croissant's own)."""
    files, sets = [], []
    for name, level, rel, df in step_parts(release_dir, cfg):
        fid = rel.replace("/", "_")
        files.append(
            {
                "@type": "cr:FileObject",
                "@id": fid,
                "name": fid,
                "contentUrl": rel,
                "encodingFormat": "application/x-parquet",
                "sha256": writers.sha256_file(Path(release_dir) / rel),
            }
        )
        part = common.Part(df["split"][0], level, f"{STEP_CONFIG}_{name}", df)
        sets.append(record_set(part, fid))
    return files, sets


def wrong_step_lines(configs: dict) -> list[str]:
    """Per source, what its wrong steps are: the count of each error kind over every step file (the reconstruction
    config's `step_error_kinds_json`), natural kinds first."""
    counts: dict[str, dict[str, int]] = {}
    for _, df in configs.get(STEP_RECONSTRUCTION_CONFIG, {}).values():
        if not {"source_slug", "step_error_kinds_json"} <= set(df.columns):
            return []
        for slug, kinds in df.select("source_slug", "step_error_kinds_json").iter_rows():
            for k in json.loads(kinds):
                if k is not None:
                    counts.setdefault(slug, {})[k] = counts.setdefault(slug, {}).get(k, 0) + 1
    out = []
    for slug in sorted(counts):
        kinds = sorted(counts[slug].items(), key=lambda kv: (not kv[0].startswith("natural_"), kv[0]))
        out.append(f"- {slug}: {sum(counts[slug].values())} wrong steps: " + ", ".join(f"{k} {n}" for k, n in kinds))
    return out


def step_section(configs: dict, cfg: Settings) -> str:
    """The card's section on the step track (empty when the release has none)."""
    if STEP_CONFIG not in configs:
        return ""
    splits = ", ".join(f"`{name}` ({df.height} items)" for name, (_, df) in configs[STEP_CONFIG].items())
    xf = common.export_files(cfg)
    return f"""
## Process verification (T13, step track)

Config `{STEP_CONFIG}` ({splits}): a task goal (`question`), ordered steps (`response.steps`), each shown by 1-2
images (`step_image_index_json` indexes `images`), and a label per step in `response.process_correctness`: 1 the
step's sentence is true of its frames, -1 false, 0 neutral (idle, or next to a label change; never scored). The
`prompt` asks for one verdict per step, `+` or `-`, inside `<STEPS>...</STEPS>`; `answer` is the gold output.
Wrong steps come from the sources' own failure records (REASSEMBLE primitives and actions, RH20T ratings) and from
errors placed in the frames. `{STEP_RECONSTRUCTION_CONFIG}` holds each step's frames and the bookkeeping, by
`item_id`: never show it to a model. The same rows in VisualProcessBench's jsonl layout:
`{xf["visualprocessbench_eval"]}` (and per level, SFT).

Wrong steps per source (natural_*: the source's own failure records; the others placed in the frames, docs/steps.md
"Labels"):

{chr(10).join(wrong_step_lines(configs)) or "- none"}
"""
