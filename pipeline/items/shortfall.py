"""Families short of their quota after the frames stage, with what the stage measured and why in a sentence.

    short = shortfall(items, quotas, source="aist", pool=pool, gate_dropped={"T3": 2})
    short[0]["reason"]   # "of its 177 candidates (Down 46, Left 45, Right 40, Up 46), 117 lie within 20 frames of
                         #  an item chosen from the same unit (min_gap)"

The record (items/<slug>_shortfall.json) says for each short family what was asked and taken (`quota`, `selected`,
`missing`) and, given the candidate pool, where its candidates went: `pool` and `pool_labels` (the family's
candidates and their answer labels), `selected_labels`, `gate_dropped` (tried and rejected by the visual gate),
`near_selected` (left out because they lie closer than the family's `min_gap` to an item taken from the same unit),
the family's `min_gap` and `equal_per_unit`; `left_out`: why the pool is the size it is, what the family generator's
own rules left out before any selection, a figure per rule (pipeline/families/common.py `LeftOut`: `name`, the config
key `setting`, `what` it looked at, `considered`, `excluded`, `excluded_labels`, `why`); and `reason`: those figures
worded (`shortfall_reason`), e.g. REASSEMBLE T7 on the demo corpus:

    its candidate pool holds only 2 items (No 1, Yes 1), all of them taken: of 23 outcome segments, 21 (all success)
    had no segment of the other outcome to be paired with in the same task or recording (same_task_pools)

Nothing is explained per family in code: the sentence is made from the figures alone, so a new family, rule or
source gets its own.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl


def _task_order(task_id: str) -> int:
    return int(task_id[1:]) if task_id[1:].isdigit() else 10**6


def shortfall(
    items: pl.DataFrame,
    quotas: dict,
    source: str | None = None,
    pool: pl.DataFrame | None = None,
    gate_dropped: dict[str, int] | None = None,
    unit_word: str = "unit",
    left_out: dict[str, list[dict]] | None = None,
) -> list[dict]:
    """Families with fewer items than their quota: [{source, task_id, quota, selected, missing}] (never padded).
    `quotas` is {task: n} for one source (give `source` when items may be empty) or {source: {task: n}}; a
    `Quotas` dict (pipeline/items/selection.py) also gives each family's min_gap and equal_per_unit. With the
    candidate `pool`, each entry also says where the candidates went and why, in figures and in a sentence (module
    docstring); `gate_dropped`: {task: candidates the visual gate rejected}; `unit_word`: the source's unit
    (episode, recording) in that sentence; `left_out`: {task: the generator's figures per rule} (the candidate
    pool's, pipeline/stages.py `left_out`)."""
    have: dict[tuple[str, str], int] = defaultdict(int)
    if items.height:
        for r in items.group_by(["source", "task_id"]).len().iter_rows(named=True):
            have[(r["source"], r["task_id"])] = int(r["len"])
    want: dict[tuple[str, str], int] = {}
    if quotas and all(isinstance(v, dict) for v in quotas.values()):
        for s, qs in quotas.items():
            for t, q in qs.items():
                want[(s, t)] = int(q)
    else:
        srcs = {source} if source else ({s for s, _ in have} or {None})
        for s in srcs:
            for t, q in (quotas or {}).items():
                want[(s, t)] = int(q)
    settings = getattr(quotas, "settings", {}) or {}
    out = []
    for (s, t), q in sorted(want.items(), key=lambda kv: (str(kv[0][0]), _task_order(kv[0][1]))):
        got = have.get((s, t), 0)
        if got >= q:
            continue
        rec = {"source": s, "task_id": t, "quota": q, "selected": got, "missing": q - got}
        if pool is not None:
            st = settings.get(t, {})
            min_gap = int(st.get("min_gap", 0) or 0)
            rec.update(_label_counts(pool, s, t, "pool"), **_label_counts(items, s, t, "selected"))
            rec.update(
                gate_dropped=int((gate_dropped or {}).get(t, 0)),
                near_selected=_near_selected(pool, items, s, t, min_gap),
                min_gap=min_gap,
                equal_per_unit=bool(st.get("equal_per_unit", False)),
                left_out=[dict(r) for r in (left_out or {}).get(t, []) if isinstance(r, dict)],
            )
            rec["reason"] = shortfall_reason(rec, unit_word)
        out.append(rec)
    return out


def _family(df: pl.DataFrame, source: str | None, task_id: str) -> pl.DataFrame:
    if df.height == 0:
        return df
    return df.filter((pl.col("task_id") == task_id) & ((pl.col("source") == source) if source else pl.lit(True)))


def _label_counts(df: pl.DataFrame, source: str | None, task_id: str, name: str) -> dict:
    """{name: rows, name_labels: {answer_text: rows}} of one (source, task) of a pool or selection (`name` selected:
    the labels only)."""
    sub = _family(df, source, task_id)
    labels = dict(sorted(sub.group_by("answer_text").len().iter_rows())) if sub.height else {}
    out = {f"{name}_labels": {str(k): int(v) for k, v in labels.items()}}
    return out if name == "selected" else {name: sub.height, **out}


def _near_selected(pool: pl.DataFrame, items: pl.DataFrame, source: str | None, task_id: str, min_gap: int) -> int:
    """Candidates of the family not taken whose anchor frame lies closer than `min_gap` to an item of the same family
    taken from the same unit: what the spacing rule left out."""
    if min_gap <= 0:
        return 0
    fam, sel = _family(pool, source, task_id), _family(items, source, task_id)
    if not fam.height or not sel.height:
        return 0
    rest = fam.filter(~pl.col("candidate_key").is_in(sel["candidate_key"].implode()))
    near = rest.select("candidate_key", "unit_id", "anchor_frame").join(
        sel.select("unit_id", pl.col("anchor_frame").alias("_taken")), on="unit_id"
    )
    return near.filter((pl.col("anchor_frame") - pl.col("_taken")).abs() < min_gap)["candidate_key"].n_unique()


def _labels(counts: dict | None) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in (counts or {}).items())


RULES_SHOWN = 3  # the generator's rules a reason names at most (those that left out the largest share first)


def shortfall_reason(rec: dict, unit_word: str = "unit") -> str:
    """Why a family fell short, as a sentence made from the record's figures: how large its candidate pool is and
    where the candidates not taken went (the visual gate, the spacing rule `min_gap`, the same count from every
    unit `equal_per_unit`), and what the generator's own rules left out of the pool (`left_out`: `rules_reason`).
    A record without the pool's figures says what it has."""
    selected, quota = int(rec.get("selected", 0)), int(rec.get("quota", 0))
    if not isinstance(rec.get("pool"), int):
        return f"the selection found {selected:,} usable candidates for a quota of {quota:,}"
    pool, labels = rec["pool"], _labels(rec.get("pool_labels"))
    gate, near = int(rec.get("gate_dropped") or 0), int(rec.get("near_selected") or 0)
    rest = max(0, pool - selected - gate - near)
    where = []
    if gate:
        where.append(f"{gate:,} failed the visual gate (unreadable, black, flat or near-identical frames)")
    if near:
        gap = rec.get("min_gap")
        where.append(f"{near:,} lie within {gap} frames of an item chosen from the same {unit_word} (min_gap)")
    if rest and rec.get("equal_per_unit"):
        where.append(
            f"{rest:,} were left out so that every {unit_word} gives the same number of items (equal_per_unit)"
        )
    elif rest:
        where.append(f"{rest:,} were not reached by the selection")
    rules = rules_reason(rec.get("left_out"))
    if pool < quota:
        head = f"its candidate pool holds only {pool:,} items" + (f" ({labels})" if labels else "")
        if not where:
            return head + ", all of them taken" + (f": {rules}" if rules else "")
        return head + f": {selected:,} taken, " + _and(where) + (f"; before selection, {rules}" if rules else "")
    head = f"of its {pool:,} candidates" + (f" ({labels})" if labels else "")
    text = f"{head}, {selected:,} were taken and " + _and(where) if where else f"{head}, {selected:,} were taken"
    return text + (f"; before selection, {rules}" if rules else "")


def rules_reason(figures, shown: int = RULES_SHOWN) -> str:
    """What a family generator's rules left out of its pool, from their figures (pipeline/families/common.py
    `LeftOut`): "of 18 arms, 9 had a calibrated mapping naming fewer than 4 directions, so are not asked about
    (calibrated_direction)", for the `shown` rules that left out the largest share of what they looked at, in the
    generator's order ('' when no rule left anything out)."""
    rules = [
        r
        for r in (figures if isinstance(figures, list) else [])
        if isinstance(r, dict) and isinstance(r.get("excluded"), int) and r["excluded"] > 0 and r.get("considered")
    ]
    top = sorted(range(len(rules)), key=lambda i: (-rules[i]["excluded"] / rules[i]["considered"], i))[:shown]
    parts = []
    for i in sorted(top):
        r = rules[i]
        by = {str(k): int(v) for k, v in (r.get("excluded_labels") or {}).items() if v}
        split = ""
        if len(by) == 1 and sum(by.values()) == r["excluded"]:
            split = f" (all {next(iter(by))})"
        elif by:
            split = f" ({_labels(by)})"
        parts.append(
            f"of {int(r['considered']):,} {r.get('what', 'candidates')}, {r['excluded']:,}{split} "
            f"{r.get('why', 'were left out')} ({r.get('name', 'a rule')})"
        )
    return "; ".join(parts)


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
