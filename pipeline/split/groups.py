"""Isolation groups: union-find over the units' isolation keys (a key is one unit field or a tuple of them)."""

from __future__ import annotations

import polars as pl

from .policy import UNIT_KEYS, key_name, merge_keys, source_policy


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def key_values(sub: pl.DataFrame, key: tuple[str, ...]) -> list[tuple[str, ...] | None]:
    """Per unit, its value of `key` (a tuple of fields); None when any field is unknown (such a unit merges on it
    with nobody)."""
    cols = [sub[f].to_list() for f in key]
    return [None if any(v is None or v == "" for v in vals) else tuple(vals) for vals in zip(*cols)]


def merged_ids(unit_ids: list[str], values: dict[tuple[str, ...], list]) -> list[str]:
    """Group id per unit: units sharing a value of any key are one group (transitively). A merged group is named
    "<key>=<smallest value of that key in the group>" for the first key the group has a value of (fields joined by
    ","); a unit that shares nothing keeps its unit_id. Merged ids contain "=" and never collide with unit ids."""
    uf = _UnionFind(len(unit_ids))
    for vals in values.values():
        first: dict[tuple, int] = {}
        for i, v in enumerate(vals):
            if v is None:
                continue
            if v in first:
                uf.union(first[v], i)
            else:
                first[v] = i
    members: dict[int, list[int]] = {}
    for i in range(len(unit_ids)):
        members.setdefault(uf.find(i), []).append(i)
    gid = list(unit_ids)
    for mem in members.values():
        if len(mem) == 1:
            continue
        name = None
        for key, vals in values.items():
            present = sorted(v for v in (vals[i] for i in mem) if v is not None)
            if present:
                name = f"{key_name(key)}={','.join(present[0])}"
                break
        for i in mem:
            gid[i] = name
    return gid


# build_groups' table, which the split stage also writes (split/groups.parquet) for its checks to read
GROUPS_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "split_group_id": pl.String,
    "unit_task_id": pl.String,
    **{c: pl.String for c in UNIT_KEYS[1:]},
}


def build_groups(items: pl.DataFrame, units: pl.DataFrame | None, policy: dict) -> pl.DataFrame:
    """One row per (source, unit_id) of `items` ∪ `units` with its split_group_id, plus the unit keys used by OOD
    levels (`unit_task_id` = the upstream task, operator_id, scene_id, config_id, taxonomy; null when unknown).

    Default: group = unit. `policy["sources"][slug]["merge_keys"]` merges units sharing a value of any listed key
    (a field or a tuple of fields; union-find, transitive)."""
    cols = ["source", "unit_id", *UNIT_KEYS]
    frames = []
    if units is not None and units.height:
        u = units.select(
            [pl.col(c).cast(pl.String) if c in units.columns else pl.lit(None, pl.String).alias(c) for c in cols]
        )
        frames.append(u)
    if items is not None and items.height:
        it = (
            items.select("source", "unit_id")
            .unique()
            .with_columns([pl.lit(None, pl.String).alias(c) for c in UNIT_KEYS])
        )
        frames.append(it.select(cols))
    if not frames:
        return pl.DataFrame(schema=GROUPS_SCHEMA)
    # the units table wins over the bare (source, unit_id) rows of items
    table = (
        pl.concat(frames)
        .with_row_index("__o")
        .sort("__o")
        .unique(subset=["source", "unit_id"], keep="first", maintain_order=True)
        .drop("__o")
        .sort("source", "unit_id")
    )
    out = []
    for source in table["source"].unique().sort().to_list():
        sub = table.filter(pl.col("source") == source)
        keys = merge_keys(source_policy(policy, source))
        unit_ids = sub["unit_id"].to_list()
        gid = merged_ids(unit_ids, {k: key_values(sub, k) for k in keys}) if keys else list(unit_ids)
        out.append(sub.with_columns(pl.Series("split_group_id", gid, dtype=pl.String)))
    res = pl.concat(out).rename({"task_id": "unit_task_id"})
    return res.select("source", "unit_id", "split_group_id", "unit_task_id", *UNIT_KEYS[1:]).sort("source", "unit_id")
