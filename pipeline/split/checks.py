"""Checks on a split (plain functions returning problems; the Dagster shell wires them as asset checks)."""

from __future__ import annotations

import polars as pl


def leaked_groups(items: pl.DataFrame) -> list[str]:
    """Split groups with items on both sides (must be empty). Compared across sources: a group id shared by two
    sources would also be reported (conservative)."""
    if not items.height:
        return []
    both = (items.group_by("split_group_id").agg(pl.col("split").n_unique().alias("k"))
            .filter(pl.col("k") > 1))
    return sorted(both["split_group_id"].to_list())


def group_lists(items: pl.DataFrame) -> dict[str, list[str]]:
    """Sorted eval and sft group ids (metadata/split_groups_{eval,sft}.txt)."""
    return {s: sorted(items.filter(pl.col("split") == s)["split_group_id"].unique().to_list()) for s in ("eval", "sft")}


def group_count_problems(summary: dict, policy: dict) -> list[str]:
    """Sources whose eval group count differs from round(eval_ratio × groups) (OOD levels add their groups on top)."""
    out = []
    for slug, s in sorted(summary.get("sources", {}).items()):
        ood_groups = sum(int(v.get("groups", 0)) for v in (s.get("ood") or {}).values() if isinstance(v, dict)
                         and "held_out_values" in v)
        want = s.get("eval_groups_target", 0) + ood_groups
        if s["eval_groups"] != want:
            out.append(f"{slug}: {s['eval_groups']} eval groups, expected {want}")
    return out

