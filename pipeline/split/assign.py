"""split_items: every item to eval (at a level) or SFT by whole groups, per source, with the summary."""

from __future__ import annotations

import json

import polars as pl

from pipeline.core.pool import run_tasks
from .ours import our_rule
from .levels import choose_values
from .objective import make_pool
from .policy import UNIT_KEYS, family_sort_key, key_name, merge_keys, source_policy
from .public import public_rule
from .report import _r, _selection_report


_KEY_COLUMNS = {
    "task_id": ("unit_task_id", "source_task_id"),
    "operator_id": ("operator_id",),
    "scene_id": ("scene_id",),
    "config_id": ("config_id",),
    "taxonomy": ("taxonomy",),
}


def _attach_groups(items: pl.DataFrame, groups: pl.DataFrame | None) -> tuple[pl.DataFrame, int]:
    df = items
    missing = 0
    if groups is not None:
        g = groups.select(
            [c for c in groups.columns if c in ("source", "unit_id", "split_group_id", "unit_task_id", *UNIT_KEYS[1:])]
        )
        g = g.rename({c: f"__g_{c}" for c in g.columns if c not in ("source", "unit_id")})
        df = df.join(g, on=["source", "unit_id"], how="left", maintain_order="left")
        missing = int(df.filter(pl.col("__g_split_group_id").is_null()).select("source", "unit_id").unique().height)
        df = df.with_columns(pl.coalesce("__g_split_group_id", "unit_id").alias("__gid"))
    elif "split_group_id" in df.columns:
        df = df.with_columns(
            pl.coalesce("split_group_id", *(["unit_id"] if "unit_id" in df.columns else []))
            .cast(pl.String)
            .alias("__gid")
        )
    else:
        df = df.with_columns(pl.col("unit_id").cast(pl.String).alias("__gid"))
    return df, missing


def _strs(values) -> list[str]:
    return sorted(str(v) for v in values)


def _key_column(df: pl.DataFrame, key: str) -> str | None:
    for c in _KEY_COLUMNS.get(key, (key,)):
        for name in (f"__g_{c}", c):
            if name in df.columns:
                return name
    return None


def _ood_levels(sub: pl.DataFrame, ood_cfg: dict, seed: int, source: str, policy: dict) -> tuple[dict[str, str], dict]:
    """Groups held out at L3 then L2: every group (not held out already) holding a unit with a held-out key value;
    the values reach `item_share` of the source's items and balance the level's answer labels as far as the pool
    allows (levels.choose_values). Returns {group: level} and a report."""
    level_of: dict[str, str] = {}
    report: dict = {}
    n_items = sub.height
    for level in ("L3", "L2"):
        lc = ood_cfg.get(level)
        if not lc:
            continue
        key = lc["key"]
        col = _key_column(sub, key)
        rep = {
            "key": key,
            "item_share_target": _r(float(lc["item_share"])),
            "families": sorted(lc.get("families") or [], key=family_sort_key),
        }
        if col is None:
            rep["skipped"] = f"no {key} column"
            report[level] = rep
            continue
        free = sub.filter(~pl.col("__gid").is_in(_strs(level_of)))
        vals = sorted(str(v) for v in free.filter(pl.col(col).is_not_null())[col].unique().to_list())
        free = free.with_columns(pl.col(col).cast(pl.String))
        goal = float(lc["item_share"]) * n_items
        chosen, balance = choose_values(free, col, vals, goal, policy, seed, source, level) if vals else ([], {})
        gids = sorted(set(free.filter(pl.col(col).is_in(_strs(chosen)))["__gid"].to_list()))
        for g in gids:
            level_of[g] = level
        rep.update(
            {
                "held_out_values": chosen,
                "groups": len(gids),
                "values_available": len(vals),
                "items_goal": _r(goal),
                "label_balance": balance,
            }
        )
        report[level] = rep
    return level_of, report


def _both_rules(task) -> tuple:
    pool, policy, seed = task
    pub = public_rule(pool, policy)
    return pool.source, pub, our_rule(pool, policy, seed, baseline=pub)


def _rule_failed(task, reason: str):
    raise RuntimeError(f"split of {task[0].source}: {reason}")


def both_rules(pools: list, policy: dict, seed: int) -> dict[str, tuple]:
    """source -> (public selection, our selection) of each pool: the sources' searches are independent, so they run
    side by side on `policy["workers"]` processes (0 = cores; 1 = one after another in this process)."""
    out: dict[str, tuple] = {}
    # the largest pools first: the small ones then fill in beside them (the step waits for the last to finish)
    pools = sorted(pools, key=lambda p: -p.n)
    run_tasks(
        _both_rules,
        [(p, policy, seed) for p in pools],
        policy["workers"],
        lambda r: out.__setitem__(r[0], r[1:]),
        _rule_failed,
    )
    return out


def split_items(items: pl.DataFrame, groups: pl.DataFrame | None, policy: dict, seed: int) -> tuple[pl.DataFrame, dict]:
    """Assign every item to "eval" or "sft" by whole split groups, per source.

    `items` needs source, unit_id (or split_group_id), task_id; `answer` (letter) and `num_choices` enable the letter
    term. `groups` is build_groups' table (None: the items' own split_group_id, else unit_id). Returns the items (input
    order, same columns) plus split, split_group_id (and eval_level when OOD levels are enabled), and the summary."""
    ratio = float(policy["eval_ratio"])
    rule = str(policy["rule"])
    lam = float(policy["objective"]["letter_weight"])
    ood = policy["ood"]
    ood_on = bool(ood["enabled"])
    df, missing = _attach_groups(items, groups)
    split_of: dict[tuple[str, str], str] = {}
    level_of: dict[tuple[str, str], str] = {}
    excluded_families: dict[str, set] = {}
    src_summaries: dict[str, dict] = {}
    prepared = {}
    for source in sorted(df["source"].unique().to_list()):
        sub = df.filter(pl.col("source") == source)
        s_ood = (ood["sources"].get(source) or {}) if ood_on else {}
        held_fams = set((s_ood.get("L3") or {}).get("families") or [])
        excluded_families[source] = held_fams
        lv, ood_report = _ood_levels(sub, s_ood, seed, source, policy) if s_ood else ({}, {})
        rest = sub.filter(~pl.col("__gid").is_in(_strs(lv)) & ~pl.col("task_id").is_in(_strs(held_fams)))
        pool = make_pool(rest, policy, source, group_col="__gid") if rest.height else None
        prepared[source] = (sub, lv, ood_report, pool)
    rules = both_rules([p for *_, p in prepared.values() if p is not None and p.n], policy, seed)
    for source, (sub, lv, ood_report, pool) in prepared.items():
        sp = source_policy(policy, source)
        rest_groups = sorted(set(sub["__gid"].to_list()) - set(lv))
        chosen: set[str] = set()
        sel_report: dict = {}
        if pool is not None and pool.n:
            pub, ours = rules[source]
            use = ours if rule == "ours" else pub
            chosen = set(use.eval_groups(pool))
            sel_report = _selection_report(
                pool,
                ours,
                pub,
                rule,
                lam if pool.letters is not None else 0.0,
                policy["ours"]["max_family_deviation_pts"],
            )
        # groups whose only items belong to held-out families are not in the pool: they stay SFT (items excluded)
        for g in rest_groups:
            split_of[(source, g)] = "eval" if g in chosen else "sft"
            if g in chosen:
                level_of[(source, g)] = "L1"
        for g, lev in lv.items():
            split_of[(source, g)], level_of[(source, g)] = "eval", lev
        all_groups = sorted(set(sub["__gid"].to_list()))
        eval_groups = [g for g in all_groups if split_of[(source, g)] == "eval"]
        keys = merge_keys(sp)
        summary = {
            "group_unit": sp["group_unit"]
            if not keys
            else f"{sp['group_unit']} merged by {' and '.join(key_name(k) for k in keys)}",
            "merge_keys": [list(k) for k in keys],
            "groups": len(all_groups),
            "units": int(sub["unit_id"].n_unique()) if "unit_id" in sub.columns else len(all_groups),
            "eval_groups": len(eval_groups),
            "sft_groups": len(all_groups) - len(eval_groups),
            "eval_groups_target": pool.n_eval if pool is not None else 0,
            **sel_report,
        }
        if missing and groups is not None:
            summary["units_without_group_row"] = int(
                sub.filter(pl.col("__g_split_group_id").is_null())["unit_id"].n_unique()
            )
        if ood_on:
            summary["ood"] = ood_report
        src_summaries[source] = summary

    sp_df = pl.DataFrame(
        {
            "source": [k[0] for k in split_of],
            "__gid": [k[1] for k in split_of],
            "split": list(split_of.values()),
            "__level": [level_of.get(k) for k in split_of],
        },
        schema={"source": pl.String, "__gid": pl.String, "split": pl.String, "__level": pl.String},
    )
    df = df.drop([c for c in ("split", "eval_level") if c in df.columns])
    df = df.join(sp_df, on=["source", "__gid"], how="left", maintain_order="left")
    held = pl.lit(False)
    for source, fams in excluded_families.items():
        if fams:
            held = held | ((pl.col("source") == source) & pl.col("task_id").is_in(sorted(fams)))
    df = df.with_columns(held.alias("__held"))
    if ood_on:
        df = df.with_columns(
            pl.when(pl.col("split") == "eval")
            .then(pl.when(pl.col("__held")).then(pl.lit("L3")).otherwise(pl.col("__level")))
            .otherwise(pl.lit(None, pl.String))
            .alias("eval_level")
        )
    excluded = df.filter(pl.col("__held") & (pl.col("split") == "sft"))
    df = df.filter(~(pl.col("__held") & (pl.col("split") == "sft")))

    # counts per source from the final rows
    for source, summary in src_summaries.items():
        s = df.filter(pl.col("source") == source)
        tc = lambda f: {r[0]: int(r[1]) for r in f.group_by("task_id").agg(pl.len()).iter_rows()}
        total_c, eval_c, sft_c = tc(s), tc(s.filter(pl.col("split") == "eval")), tc(s.filter(pl.col("split") == "sft"))
        summary.update(
            {
                "total": s.height,
                "eval": sum(eval_c.values()),
                "sft": sum(sft_c.values()),
                "task_counts_total": total_c,
                "task_counts_eval": eval_c,
                "task_counts_sft": sft_c,
                "task_eval_share": {f: _r(eval_c.get(f, 0) / n) for f, n in total_c.items()},
            }
        )
        if ood_on:
            ex = excluded.filter(pl.col("source") == source)
            summary["ood"]["excluded_sft_items"] = tc(ex) if ex.height else {}
            ev = s.filter(pl.col("split") == "eval")
            summary["ood"]["levels"] = {
                lev: {
                    "items": ev.filter(pl.col("eval_level") == lev).height,  # held-out families' items count in L3
                    "groups": sum(1 for (src, _), v in level_of.items() if src == source and v == lev),
                    "task_counts": tc(ev.filter(pl.col("eval_level") == lev)),
                }
                for lev in ("L1", "L2", "L3")
            }

    out_cols = [c for c in items.columns if c not in ("split", "split_group_id", "eval_level")]
    df = df.with_columns(pl.col("__gid").alias("split_group_id"))
    df = df.select(*out_cols, "split", "split_group_id", *(["eval_level"] if ood_on else []))
    eval_n = int((df["split"] == "eval").sum())
    summary = {
        "seed": int(seed),
        "eval_ratio": ratio,
        "split_policy": policy["split_policy"],
        "rule": rule,
        "eval_items": eval_n,
        "sft_items": df.height - eval_n,
        "total_items": df.height,
        "excluded_items": excluded.height,
        "sources": src_summaries,
    }
    return df, json.loads(json.dumps(summary, sort_keys=True))
