"""Checks on a split (plain functions returning problems; the Dagster shell wires them as asset checks)."""

from __future__ import annotations

import polars as pl

from .policy import UNIT_KEYS, key_name, merge_keys, source_policy


def leaked_groups(items: pl.DataFrame) -> list[str]:
    """Split groups with items on both sides (must be empty). Compared across sources: a group id shared by two
    sources would also be reported (conservative)."""
    if not items.height:
        return []
    both = items.group_by("split_group_id").agg(pl.col("split").n_unique().alias("k")).filter(pl.col("k") > 1)
    return sorted(both["split_group_id"].to_list())


def group_lists(items: pl.DataFrame) -> dict[str, list[str]]:
    """Sorted eval and sft group ids (metadata/split_groups_{eval,sft}.txt)."""
    return {s: sorted(items.filter(pl.col("split") == s)["split_group_id"].unique().to_list()) for s in ("eval", "sft")}


def group_count_problems(summary: dict, policy: dict) -> list[str]:
    """Sources whose eval group count differs from round(eval_ratio × groups) (OOD levels add their groups on top)."""
    out = []
    for slug, s in sorted(summary.get("sources", {}).items()):
        ood_groups = sum(
            int(v.get("groups", 0))
            for v in (s.get("ood") or {}).values()
            if isinstance(v, dict) and "held_out_values" in v
        )
        want = s.get("eval_groups_target", 0) + ood_groups
        if s["eval_groups"] != want:
            out.append(f"{slug}: {s['eval_groups']} eval groups, expected {want}")
    return out


def _with_unit_fields(items: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    fields = groups.select("source", "unit_id", pl.col("unit_task_id").alias("task_id"), *UNIT_KEYS[1:])
    return items.select("source", "unit_id", "split").join(fields, on=["source", "unit_id"], how="left")


def isolation_key_problems(items: pl.DataFrame, groups: pl.DataFrame, policy: dict) -> list[str]:
    """Values of a source's isolation keys (composite ones included) found on both sides, recomputed from the units'
    own fields (so a wrong group id is caught, not trusted). `items` carry source, unit_id, split."""
    df = _with_unit_fields(items, groups)
    out = []
    for source in sorted(df["source"].unique().to_list()):
        sub = df.filter(pl.col("source") == source)
        for key in merge_keys(source_policy(policy, source)):
            both = (
                sub.drop_nulls(list(key))
                .group_by(list(key))
                .agg(pl.col("split").n_unique().alias("k"))
                .filter(pl.col("k") > 1)
                .sort(list(key))
            )
            if both.height:
                eg = [",".join(r) for r in both.select(list(key)).head(3).iter_rows()]
                out.append(f"{source}: {both.height} {key_name(key)} values in both eval and sft, e.g. {eg}")
    return out


def held_out_problems(items: pl.DataFrame, groups: pl.DataFrame, summary: dict) -> list[str]:
    """Held-out values of the OOD levels (RH20T scenes and tasks, GM-100 / AIST tasks) that still have SFT items."""
    df = _with_unit_fields(items, groups).filter(pl.col("split") == "sft")
    out = []
    for source, s in sorted(summary["sources"].items()):
        for level, rep in sorted((s.get("ood") or {}).items()):
            if not isinstance(rep, dict) or "held_out_values" not in rep:
                continue
            key = rep["key"]
            leak = df.filter((pl.col("source") == source) & pl.col(key).is_in(rep["held_out_values"]))
            if leak.height:
                vals = sorted(set(leak[key].to_list()))
                out.append(f"{source}: {level} held-out {key} {vals[:3]} has {leak.height} sft items")
    return out


def level_count_problems(items: pl.DataFrame, summary: dict, policy: dict) -> list[str]:
    """Eval levels as split_summary.json states them (what makes a release wrong): every eval item has a level and
    every SFT item none, and the rows per level are the summary's counts. A level the corpus cannot fill is a
    warning (level_share_warnings), not a problem."""
    ood = policy["ood"]
    if not ood["enabled"]:
        return []
    if "eval_level" not in items.columns:
        return ["items lack eval_level while ood levels are enabled"]
    out = []
    bad = items.filter((pl.col("split") == "eval") != pl.col("eval_level").is_not_null())
    if bad.height:
        out.append(f"{bad.height} items whose eval_level disagrees with their split")
    for source, s in sorted(summary["sources"].items()):
        sub = items.filter((pl.col("source") == source) & (pl.col("split") == "eval"))
        levels = (s.get("ood") or {}).get("levels") or {}
        for level in ("L1", "L2", "L3"):
            got = sub.filter(pl.col("eval_level") == level).height
            want = (levels.get(level) or {}).get("items", 0)
            if got != want:
                out.append(f"{source}: {got} {level} items, split_summary says {want}")
    return out


def level_share_warnings(summary: dict, policy: dict) -> list[str]:
    """Configured eval levels (L2, L3) that hold no items, or less than their item_share of the source while more
    than one value could still be held out: statistics a small corpus cannot meet. Recorded with the release
    (provenance.json `warnings`, the card), never blocking: the levels it holds are still right."""
    ood = policy["ood"]
    if not ood["enabled"]:
        return []
    out = []
    for source, s in sorted(summary["sources"].items()):
        conf = ood["sources"].get(source) or {}
        levels = (s.get("ood") or {}).get("levels") or {}
        for level in ("L2", "L3"):
            if level not in conf:
                continue
            got = int((levels.get(level) or {}).get("items", 0))
            rep = (s.get("ood") or {}).get(level) or {}
            goal = float(rep.get("items_goal", 0))
            exhausted = rep.get("values_available", 0) - len(rep.get("held_out_values", [])) <= 1
            if got == 0 or (got < goal and not exhausted):
                out.append(
                    f"{source}: {level} holds {got} items, configured share {conf[level]['item_share']} "
                    f"of the source is {goal:.0f}"
                )
    return out
