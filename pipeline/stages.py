"""The build's stages as plain functions over the work folder: each reads its inputs from `work_dir`, computes
with the stage modules, writes its outputs atomically, and returns a small summary dict for the orchestrator.

Dagster calls these (assets/definitions.py) but so can anyone: every function takes the merged config and,
for per-source stages, the source slug.

Work folder layout (configs/build.yaml `work_dir`):
    ir/<slug>/{units,frames,signals,segments,quarantine}.parquet   ingest
    labels/<slug>/<table>.parquet                                  labels
    candidates/<slug>.parquet                                      candidate items (over-complete pool)
    items/<slug>.parquet, items/<slug>_quarantine.parquet          selected, visually gated, choices assigned
    frame_cache/                                                   content-addressed decoded frames
    split/items.parquet, split/summary.json                        split
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl

from . import items as items_mod
from . import split as split_mod
from . import writers
from .config import path_in_repo, split_policy
from .exports import run_exports
from .validity import REPORT_FILES, run_validity
from .families import build_candidates
from .frames.cache import FrameCache
from .frames.extract import extract_from_config, requests_from_items
from .frames.gate import gate_items
from .frames.readers import AdapterReaders
from .frames.reconstruct import reconstruction_markdown
from .frames.render import add_image_hashes
from .ingest import ingest_source, quarantine_frame, read_ir, summary_text, write_ir
from .io import write_json, write_parquet
from .labels import compute_labels
from .prompts import prompt_templates_markdown
from .validate import find_path_leaks, validate_release

log = logging.getLogger(__name__)


def work_dir(cfg: dict) -> Path:
    return path_in_repo(cfg["build"]["work_dir"])


def release_dir(cfg: dict) -> Path:
    return path_in_repo(cfg["build"]["release_dir"])


def sources(cfg: dict) -> list[str]:
    return list(cfg["build"]["sources"])


# --------------------------------------------------------------------------------------------------- ingest
def run_ingest(cfg: dict, slug: str) -> dict:
    src = cfg["sources"][slug]
    result = ingest_source(slug, src["root"], src.get("adapter", {}))
    write_ir(result, work_dir(cfg) / "ir" / slug)
    log.info("%s", summary_text(slug, result))
    q = result.quarantine
    return {"units": result.units.height, "quarantined": q.height, "absent": result.absent.height,
            "frames": result.frames.height,
            "signals": result.signals.height, "segments": result.segments.height,
            "quarantine_share": q.height / max(1, q.height + result.units.height)}


def load_ir(cfg: dict, slug: str) -> dict[str, pl.DataFrame]:
    return read_ir(work_dir(cfg) / "ir" / slug)


# --------------------------------------------------------------------------------------------------- labels
def run_labels(cfg: dict, slug: str) -> dict:
    tables = compute_labels(slug, load_ir(cfg, slug), cfg)
    out = work_dir(cfg) / "labels" / slug
    for name, df in tables.items():
        write_parquet(out / f"{name}.parquet", df)
    return {name: df.height for name, df in tables.items()}


def load_labels(cfg: dict, slug: str) -> dict[str, pl.DataFrame]:
    return {p.stem: pl.read_parquet(p) for p in sorted((work_dir(cfg) / "labels" / slug).glob("*.parquet"))}


# --------------------------------------------------------------------------------------------------- candidates
def run_candidates(cfg: dict, slug: str) -> dict:
    pool = build_candidates(slug, load_ir(cfg, slug), load_labels(cfg, slug), cfg)
    write_parquet(work_dir(cfg) / "candidates" / f"{slug}.parquet", pool)
    return {"candidates": pool.height,
            "per_family": {r["task_id"]: r["len"] for r in pool.group_by("task_id").len().sort("task_id").iter_rows(named=True)}}


# --------------------------------------------------------------------------------------------------- frames
def run_frames(cfg: dict, slug: str, progress=None) -> dict:
    """Select each family's quota, decode its frames, gate them, and ask for replacements until the quotas hold or the
    pool runs out; then assign balanced answer letters and hash the images each item shows."""
    seed = cfg["build"]["release_seed"]
    gate_cfg = cfg["build"]["items"]
    wd = work_dir(cfg)
    pool = pl.read_parquet(wd / "candidates" / f"{slug}.parquet")
    quotas = items_mod.quotas(cfg, slug)
    cache = FrameCache.from_config(cfg)
    readers = AdapterReaders.from_config(cfg)
    tried: set[str] = set()
    survivors = None  # items that passed the gate so far, over all rounds
    quarantine_parts, frame_parts = [], []
    need = {t: q for t, q in quotas.items() if q}
    for _ in range(int(gate_cfg["max_gate_rounds"])):
        if not need:
            break
        batch = items_mod.select_candidates(pool, need, seed, exclude_keys=tried, extra=gate_cfg["gate_margin"],
                                            cfg_tasks=cfg["tasks"], prior=survivors)
        if not batch.height:
            break
        tried |= set(batch["candidate_key"].to_list())
        table = extract_from_config(requests_from_items(batch), readers, cache, cfg, progress=progress)
        kept, quarantined = gate_items(batch, table, cfg)
        kept = kept.drop("select_rank")
        survivors = kept if survivors is None else pl.concat([survivors, kept], how="vertical_relaxed")
        quarantine_parts.append(quarantined)
        frame_parts.append(table)
        have = dict(survivors.group_by("task_id").len().iter_rows())
        need = {t: q - have.get(t, 0) for t, q in quotas.items() if q and q - have.get(t, 0) > 0}
    if survivors is not None:  # the survivors hold each quota plus a margin: select the quota again among them, so
        # the final set keeps the selection's spread, label balance and unit coverage (a plain cut by rank would not)
        kept = items_mod.select_candidates(survivors, quotas, seed, cfg_tasks=cfg["tasks"]).drop("select_rank")
    else:
        kept = pool.clear()
    items = items_mod.assign_choices(kept, seed)
    frame_table = pl.concat(frame_parts, how="vertical_relaxed") if frame_parts else None
    if frame_table is not None:
        items = add_image_hashes(items, frame_table, cache, cfg["frames"]["image"], open_reader=readers)
    quarantine = pl.concat(quarantine_parts, how="vertical_relaxed") if quarantine_parts else quarantine_frame([])
    short = items_mod.shortfall(items, quotas, source=slug)
    write_parquet(wd / "items" / f"{slug}.parquet", items)
    write_parquet(wd / "items" / f"{slug}_quarantine.parquet", quarantine)
    write_json(wd / "items" / f"{slug}_shortfall.json", short)
    return {"items": items.height, "quota": int(sum(quotas.values())), "gate_dropped": quarantine.height,
            "frames_decoded": cache.counters["decoded"], "frames_cached": cache.counters["hits"],
            "frame_cache_bad_entries": cache.counters["bad_entries"] + cache.counters["bad_renders"],
            "shortfall": short}


# --------------------------------------------------------------------------------------------------- split
def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(frames, how="diagonal_relaxed")


def all_units(cfg: dict) -> pl.DataFrame:
    return _concat([pl.read_parquet(work_dir(cfg) / "ir" / s / "units.parquet") for s in sources(cfg)])


def letters_per_split(items: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Assign the answer letters again within each split, so eval (a few whole groups) is letter-balanced per source
    and family too, not only the pool. T8/T9 (display labels) keep theirs: their frame order, and so their rendered
    images and hashes, follow the letter; the split's letter term balances them."""
    plain = pl.col("display_labels").is_null()
    parts = [items.filter(~plain)]
    # each eval level is its own release file, so each is balanced on its own
    level = pl.col("eval_level") if "eval_level" in items.columns else pl.lit(None, pl.String)
    for name, lv in sorted(items.select("split", level.alias("lv")).unique().iter_rows(), key=str):
        sub = items.filter(plain & (pl.col("split") == name) & (level.eq_missing(lv)))
        if sub.height:
            redone = items_mod.assign_choices(sub.drop("item_key", "choices", "answer"), seed)
            parts.append(redone.select(items.columns))
    return pl.concat(parts, how="vertical_relaxed").sort("source", "task_id", "candidate_key")


def run_split(cfg: dict) -> dict:
    wd = work_dir(cfg)
    items = _concat([pl.read_parquet(wd / "items" / f"{s}.parquet") for s in sources(cfg)])
    policy, seed = split_policy(cfg)
    groups = split_mod.build_groups(items, all_units(cfg), policy)
    split_df, summary = split_mod.split_items(items, groups, policy, seed)
    split_df = letters_per_split(split_df, seed)
    for slug, s in summary["sources"].items():  # what the release finally holds, after the per-split letters
        s["letter_balance_eval"] = split_mod.eval_letter_report(split_df, policy, slug)
    write_parquet(wd / "split" / "items.parquet", split_df)
    write_json(wd / "split" / "summary.json", summary)
    return {"eval_items": summary["eval_items"], "sft_items": summary["sft_items"],
            "eval_groups": {s: v["eval_groups"] for s, v in sorted(summary["sources"].items())}}


def _split_items(cfg: dict) -> pl.DataFrame:
    return pl.read_parquet(work_dir(cfg) / "split" / "items.parquet")


def _split_summary(cfg: dict) -> dict:
    return json.loads((work_dir(cfg) / "split" / "summary.json").read_text())


# --------------------------------------------------------------------------------------------------- release
def run_release(cfg: dict) -> dict:
    eval_df, sft_df = writers.release_tables(_split_items(cfg), all_units(cfg), cfg)
    documents = {"prompt_templates": prompt_templates_markdown(cfg), "reconstruction": reconstruction_markdown(cfg)}
    out = writers.write_release(eval_df, sft_df, _split_summary(cfg), cfg, release_dir(cfg), documents)
    # card, Croissant, trainer/harness files: from the files just written (the main eval file holds level L1 only)
    exported = run_exports(cfg, release_dir(cfg))
    # the validity audit reads the written splits and adds its report to the release (and to its checksums)
    validity = run_validity(cfg)
    return {k: v for k, v in out.items() if k != "files"} | {"files": len(out["files"]) + len(exported),
                                                               "validity_problems": len(validity["problems"])}


# --------------------------------------------------------------------------------------------------- checks
def quarantine_shares(cfg: dict, slug: str | None = None) -> dict[str, float]:
    """Share of each source's units (plus whole-source rows) that ingest quarantined."""
    out = {}
    for s in ([slug] if slug else sources(cfg)):
        ir = work_dir(cfg) / "ir" / s
        if not (ir / "units.parquet").exists():
            continue
        n_ok = pl.read_parquet(ir / "units.parquet").height
        n_bad = pl.read_parquet(ir / "quarantine.parquet").height
        out[s] = round(n_bad / max(1, n_ok + n_bad), 4)
    return out


def shortfall(cfg: dict, slug: str | None = None) -> list[dict]:
    """Families below their quota, from the frames stage's reports (all sources when slug is None)."""
    out = []
    for s in ([slug] if slug else sources(cfg)):
        path = work_dir(cfg) / "items" / f"{s}_shortfall.json"
        if path.exists():
            out += json.loads(path.read_text())
    return out


def leaked_groups(cfg: dict) -> list[str]:
    return split_mod.leaked_groups(_split_items(cfg))


def eval_group_count_problems(cfg: dict) -> list[str]:
    return split_mod.group_count_problems(_split_summary(cfg), split_policy(cfg)[0])


def split_isolation_problems(cfg: dict) -> list[str]:
    """Isolation keys (composite ones too) and held-out OOD values that reach both sides, recomputed from the units."""
    items = _split_items(cfg)
    policy = split_policy(cfg)[0]
    groups = split_mod.build_groups(items, all_units(cfg), policy)
    return split_mod.isolation_key_problems(items, groups, policy) + \
        split_mod.held_out_problems(items, groups, _split_summary(cfg))


def eval_level_problems(cfg: dict) -> list[str]:
    return split_mod.level_count_problems(_split_items(cfg), _split_summary(cfg), split_policy(cfg)[0])


def validity_problems(cfg: dict) -> list[str]:
    """Families past the validity limits (configs/validity.yaml), as the release's validity report states them."""
    path = release_dir(cfg) / "metadata" / REPORT_FILES[0]
    if not path.is_file():
        return [f"metadata/{REPORT_FILES[0]}: missing"]
    return list(json.loads(path.read_text(encoding="utf-8"))["problems"])


def release_problems(cfg: dict) -> list[str]:
    return validate_release(release_dir(cfg), cfg)


def release_path_leaks(cfg: dict) -> list[str]:
    leaks = []
    for p in sorted(release_dir(cfg).rglob("*")):
        if p.is_file() and p.suffix != ".parquet":
            leaks += [f"{p.relative_to(release_dir(cfg)).as_posix()}: {hit}"
                      for hit in find_path_leaks(p.read_text(encoding="utf-8", errors="replace"))]
    return leaks
