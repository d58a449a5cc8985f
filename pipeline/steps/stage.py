"""The step track's build step (after the multiple-choice split, before the release): drafts per source from the
labels and IR, natural and injected errors, the split side of each unit's isolation group (the MCQ split's: a group
is on one side for both tracks), the shown frames decoded into the frame cache and hashed, the release rows.

    summary = run_steps(cfg)   # writes steps/items.parquet and steps/summary.json into the work folder

A unit whose group holds no multiple-choice item has no side yet: it gets no step items (counted in the summary), so
the step track never puts a group, a held-out scene or a held-out task on a side the MCQ split did not choose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import logging

import polars as pl

from ..frames.cache import FrameCache
from ..frames.extract import extract_from_config
from ..frames.readers import AdapterReaders
from ..frames.render import add_image_hashes
from pipeline.core.io import compact_json, write_json, write_parquet
from pipeline.core.pool import run_tasks
from pipeline.settings.paths import work_dir
from . import BUILDERS, perturb
from .items import reassemble_actions, set_outcome_wording
from .rows import STEP_SCHEMA, step_rows

if TYPE_CHECKING:
    from pipeline.settings.root import Settings
    from pipeline.settings.steps import StepTaskFile

log = logging.getLogger(__name__)
LEVEL_ORDER = {"L1": 1, "L2": 2, "L3": 3}


def group_sides(split_items: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """(source, unit_id) -> split_group_id, split, eval_level of its group in the MCQ split (units whose group has no
    MCQ item are left out). A group's level is the lowest level of its items (held-out families add L3 items to L1
    and L2 groups; a group the split holds out whole is L3 throughout)."""
    has_level = "eval_level" in split_items.columns
    side = (
        split_items.with_columns(pl.col("eval_level") if has_level else pl.lit(None, pl.String).alias("eval_level"))
        .group_by("source", "split_group_id")
        .agg(
            pl.col("split").unique().sort().alias("splits"),
            pl.col("eval_level").drop_nulls().unique().sort().first().alias("eval_level"),
        )
    )
    both = side.filter(pl.col("splits").list.len() > 1)
    if both.height:
        raise ValueError(f"split/items.parquet: groups on both sides: {both['split_group_id'].to_list()[:5]}")
    side = side.with_columns(pl.col("splits").list.first().alias("split")).drop("splits")
    return groups.select("source", "unit_id", "split_group_id").join(side, on=["source", "split_group_id"], how="inner")


def _source_tables(cfg: Settings, slug: str) -> tuple[dict, dict]:
    wd = work_dir(cfg)
    ir = {t: pl.read_parquet(wd / "ir" / slug / f"{t}.parquet") for t in ("units", "segments")}
    lab = {
        t: pl.read_parquet(wd / "labels" / slug / f"{t}.parquet")
        for t in ("units", "frames", "arms", "primitives", "segments")
    }
    return ir, lab


def _donor_chains(slug: str, units: pl.DataFrame, lab: dict, ir: dict, tpl: StepTaskFile) -> list[dict]:
    out = []
    for u in units.iter_rows(named=True):
        for steps in reassemble_actions(u["unit_id"], u["camera"], lab, ir, tpl):
            chain = [s for s in steps if s["kind"] == "primitive"]
            out.append(
                {
                    "unit_id": u["unit_id"],
                    "split": u["split"],
                    "eval_level": u["eval_level"],
                    "action_text": chain[0]["fields"]["action"],
                    "chain": chain,
                }
            )
    return out


def source_drafts(cfg: Settings, slug: str, tid: str, sides: pl.DataFrame) -> tuple[list[dict], dict]:
    tpl = cfg.step_tasks[tid]
    seed = int(cfg.build.release_seed)
    ir, lab = _source_tables(cfg, slug)
    outcome = lab["units"].select("unit_id", "outcome")
    units = (
        ir["units"]
        .select("unit_id", "camera", "num_frames", "unit_type", "task_id", "licence")
        .join(outcome, on="unit_id", how="left")
        .join(sides.filter(pl.col("source") == slug).drop("source"), on="unit_id", how="left")
    )
    no_side = units.filter(pl.col("split").is_null())
    units = units.filter(pl.col("split").is_not_null())
    scale = float(cfg.build.quota_scale[cfg.build.scale])
    quota = max(1, round(int(tpl.quota[slug]) * scale))
    pool: dict = {}
    drafts = BUILDERS[tid](slug, units, lab, ir, tpl, quota, seed, pool)
    set_outcome_wording(drafts, tpl, seed, slug)
    kinds = tpl.for_source(slug).step_kinds or []
    donors = perturb.donors_of(_donor_chains(slug, units, lab, ir, tpl)) if "primitive" in kinds else {}
    injected = perturb.inject(drafts, tpl, seed, slug, donors)
    short = {
        "quota": quota,
        "items": len(drafts),
        "units": units.height,
        "units_with_items": len({d["unit_id"] for d in drafts}),
        "candidates": pool.get("candidates", len(drafts)),
        "candidates_after_cap": pool.get("after_cap", len(drafts)),
        "cap_per_unit": int(tpl.for_source(slug).cap_per_unit),
    }
    if len(drafts) < quota:  # every candidate of every unit is taken: the pool limits
        short["reason"] = shortfall_reason(slug, short, tpl)
    return drafts, {"units_without_side": no_side.height, **short, **injected}


def shortfall_reason(slug: str, s: dict, tpl: StepTaskFile) -> str:
    """Why a source's pool holds fewer step items than its quota, in words with the pool's figures (the summary's
    `reason`: step_reason, so the quota record, the card and the manifests quote it)."""
    kinds = tpl.for_source(slug).step_kinds or []
    if "primitive" in kinds:
        made = (
            f"its {s['units']} recordings with a split side give one candidate item per high-level action (the action "
            f"last, after the whole previous one when that succeeded): {s['candidates']} in all"
        )
        more = "a second item ending with the same action would repeat its steps (a near-copy)"
    else:
        made = (
            f"its {s['units']} units with a split side give {s['candidates']} candidate windows of at most "
            f"{tpl.steps.max} steps, starting window_shift ({tpl.window_shift}) x the longest window apart"
        )
        more = "windows closer together would share most of their steps (near-copies of one another)"
    capped = s["candidates"] - s["candidates_after_cap"]
    cap = f", {capped} left out by cap_per_unit ({s['cap_per_unit']})" if capped else ""
    return f"{made}{cap}; {more}"


def _drafts_task(task: tuple) -> tuple:
    cfg, slug, tid, sides = task
    return (slug, *source_drafts(cfg, slug, tid, sides))


def _drafts_failed(task: tuple, reason: str):
    raise RuntimeError(f"step items of {task[1]}: {reason}")


def all_drafts(cfg: Settings, tid: str, slugs: list[str], sides: pl.DataFrame) -> dict[str, tuple[list[dict], dict]]:
    """slug -> (drafts, summary) of each source: the sources are independent (each reads its own IR and labels), so
    they are drafted side by side on build.executor.source_workers processes (0 = cores; 1 = in turn, here). The
    result is the same whatever the number of processes: each source's drafts depend on its tables and seed alone."""
    out: dict[str, tuple[list[dict], dict]] = {}
    # the largest source first (GM-100's episodes): the small ones then fill in beside it
    order = sorted(slugs, key=lambda s: -int(cfg.step_tasks[tid].quota.get(s, 0)))
    tasks = [(cfg, slug, tid, sides.filter(pl.col("source") == slug)) for slug in order]
    run_tasks(
        _drafts_task,
        tasks,
        cfg.build.executor.source_workers,
        lambda r: out.__setitem__(r[0], r[1:]),
        _drafts_failed,
    )
    for slug in slugs:  # said here: a worker's log does not reach the build's
        if (short := out[slug][1])["items"] < short["quota"]:  # every window taken (or thinned): the pool limits
            # one short line (at most 200 characters); the reason is in steps/summary.json and the quota record
            log.warning(
                "step items: %s: %d of a quota of %d; the pool holds no more", slug, short["items"], short["quota"]
            )
    return {slug: out[slug] for slug in slugs}


def shortfall_text(slug: str, s: dict) -> str:
    return (
        f"{slug}: {s['items']} step items of a quota of {s['quota']} ({s['quota'] - s['items']} short): "
        + step_reason(s)
    )


def step_reason(s: dict) -> str:
    """Why a source's step items fall short of its quota, in words: the `reason` its summary entry records
    (shortfall_reason), else made from the entry's figures (units with a split side, units without a side)."""
    if isinstance(s.get("reason"), str) and s["reason"].strip():
        return s["reason"].strip()
    text = (
        f"its {s.get('units', 0)} units with a split side hold no more candidate windows (steps.max, window_shift, "
        f"cap_per_unit in configs/tasks/T13.yaml)"
    )
    if s.get("units_without_side"):
        text += f"; {s['units_without_side']} units have no split side (no multiple-choice item in their group)"
    return text


def step_shortfall(cfg: Settings) -> list[str]:
    """Sources whose step items fall short of their quota, worded with the figures (steps/summary.json; a warning
    check, like the multiple-choice families' `quotas_met`: never padded)."""
    path = work_dir(cfg) / "steps" / "summary.json"
    if not path.is_file():
        return ["steps/summary.json: missing"]
    srcs = json.loads(path.read_text(encoding="utf-8"))["sources"]
    return [shortfall_text(slug, s) for slug, s in sorted(srcs.items()) if s.get("items", 0) < s.get("quota", 0)]


def _hashes(cfg: Settings, drafts: list[dict]) -> tuple[dict, list[str]]:
    """(slug, unit_id, camera, frame) -> image sha256 of every shown frame (decoded into the frame cache as the
    items stage does, the same size policy); the frames that could not be read, worded."""
    wanted = sorted(
        {(d["source"], st["unit_id"], st["camera"], int(f)) for d in drafts for st in d["steps"] for f in st["frames"]}
    )
    if not wanted:
        return {}, []
    req = pl.DataFrame(
        {
            "source": [w[0] for w in wanted],
            "unit_id": [w[1] for w in wanted],
            "camera": [w[2] for w in wanted],
            "frame_indices": [[w[3]] for w in wanted],
            "frame_indices_json": [compact_json([w[3]]) for w in wanted],
            "render_spec_json": [None] * len(wanted),
        },
        schema_overrides={"render_spec_json": pl.String},
    )
    cache = FrameCache.from_config(cfg)
    readers = AdapterReaders.from_config(cfg)
    requests = req.select("source", "unit_id", "camera", pl.col("frame_indices").list.first().alias("frame_index"))
    table = extract_from_config(requests, readers, cache, cfg)
    hashed = add_image_hashes(
        req, table, cache, cfg.frames.image.model_dump(), open_reader=readers, workers=cfg.frames.workers
    )
    out, bad = {}, []
    for w, h in zip(wanted, hashed["image_hashes_json"].to_list()):
        if h is None:
            bad.append(f"{w[0]}/{w[1]} camera {w[2]} frame {w[3]}: not decodable")
        else:
            out[w] = h[2:-2]  # compact JSON list of one digest
    return out, bad


def build_step_rows(cfg: Settings) -> tuple[pl.DataFrame, dict]:
    wd = work_dir(cfg)
    sides = group_sides(
        pl.read_parquet(wd / "split" / "items.parquet"), pl.read_parquet(wd / "split" / "groups.parquet")
    )
    frames, summary = [], {"sources": {}}
    built = list(cfg.build.sources)
    for tid, tpl in cfg.step_tasks.items():
        drafts, units = [], {}
        slugs = [s for s in built if s in tpl.sources]
        for slug, (d, s) in all_drafts(cfg, tid, slugs, sides).items():
            drafts += d
            summary["sources"][slug] = s
            for u in pl.read_parquet(wd / "ir" / slug / "units.parquet").iter_rows(named=True):
                units[(slug, u["unit_id"])] = {k: u[k] for k in ("task_id", "unit_type", "licence")}
        hashes, bad = _hashes(cfg, drafts)
        kept = [
            d
            for d in drafts
            if all(
                (d["source"], st["unit_id"], st["camera"], int(f)) in hashes for st in d["steps"] for f in st["frames"]
            )
        ]
        for b in bad:
            log.warning("step items: %s", b)
        summary["frames_not_decodable"] = bad
        summary["dropped_items"] = len(drafts) - len(kept)
        frames.append(step_rows(kept, units, hashes, tpl, cfg))
    rows = pl.concat(frames) if frames else pl.DataFrame(schema=STEP_SCHEMA)
    summary["counts"] = step_counts(rows)
    return rows, summary


def step_counts(rows: pl.DataFrame) -> dict:
    """Per source: items, steps, scored steps, the share of wrong steps that are natural, per split and level."""
    out = {}
    for slug in sorted(set(rows["source_slug"].to_list())):
        sub = rows.filter(pl.col("source_slug") == slug)
        labels = [v for r in sub["response"].to_list() for v in r["process_correctness"]]
        kinds = [k for j in sub["step_error_kinds_json"].to_list() for k in json.loads(j) if k]
        natural = sum(1 for k in kinds if k.startswith("natural_"))
        out[slug] = {
            "items": sub.height,
            "steps": len(labels),
            "scored_steps": sum(1 for v in labels if v != 0),
            "wrong_steps": len(kinds),
            "natural_wrong_steps": natural,
            "natural_error_share": round(natural / len(kinds), 4) if kinds else 0.0,
            "items_without_error": int((sub["first_error_index"] == -1).sum()),
            "items_per_split": {s: int(n) for s, n in sub.group_by("split").len().sort("split").iter_rows()},
            "error_kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
        }
    return out


def run_steps(cfg: Settings) -> dict:
    rows, summary = build_step_rows(cfg)
    wd = work_dir(cfg)
    write_parquet(wd / "steps" / "items.parquet", rows)
    write_json(wd / "steps" / "summary.json", summary)
    return {"step_items": rows.height, "dropped": summary.get("dropped_items", 0)}
