"""From the candidate pool to items: quotas and a seeded spread-out selection.

    q = quotas(cfg, "gm100")                                   # {"T1": 60, ...} at the configured scale
    sel = select_candidates(pool, q, seed, extra=0.1)          # the quota (+10 % reserve for the visual gate)
    missing = shortfall(sel, q, source="gm100")                # families short of their quota (reported, not padded)

Quota rounding: the release quota Q of configs/tasks/T*.yaml times build.quota_scale[build.scale], rounded half up,
at least 1 for a family the source has: q = max(1, floor(Q * scale + 0.5)) (demo 0.02: 3000 -> 60, 286 -> 6,
25 -> 1); scale 1.0 gives the release quota exactly. `quotas()` returns a `Quotas` dict that also carries each
family's `min_gap` and `balance_labels`, so `select_candidates(pool, quotas(cfg, slug), seed)` needs nothing else
(or pass cfg_tasks=cfg.tasks).

Selection, per (source, task_id), deterministic for a given seed:
  1. candidates are visited unit by unit in a seeded round-robin (the unit order and the order inside a unit are
     seeded shuffles): each pass takes at most one candidate per unit, so no unit dominates a family;
  2. a candidate is skipped when its anchor frame is closer than the family's `min_gap` to an item of the same
     family already taken in that unit;
  3. with `balance_labels: true`, each visit takes the candidate whose answer label is furthest below its share
     (water-filled over the labels the pool has), so the labels are as even as the pool allows; when no label
     still below its share can be taken anywhere, the rest of the quota is filled from any label;
  4. the target is ceil(quota * (1 + extra)); `select_rank` records the visit order (ranks < quota are the
     primary items, the rest the reserve for the visual gate). exclude_keys removes candidates beforehand.
  7. with `equal_per_unit: true` (a family whose answer a unit's row count could carry, e.g. RH20T T7, where the label
     is the unit's outcome), the round-robin runs on past the target, then every unit used gives the same number k of
     items (its first k picks): k and the m units are those that give the most label-balanced items, then the most
     items k*m <= target, then the smaller k (more units); the m units are dealt by their dominant label (water-filled
     like 3., each label's units in first-pick order) so the labels stay as even as the units allow. A unit with
     fewer than k picks is left out; the shortfall is reported like any other. Such a family is never a donor of the
     coverage repair (6.).
Coverage across the families of a source (every unit with candidates should get an item when the source's quota
allows it; the split groups by unit):
  5. the families are picked in task order and share a per-unit count of the source's items so far (primary picks of
     earlier families + `prior` items of any family); each round-robin pass visits its units by that count, fewest
     first (ties in the family's seeded unit order), so later families fill the units earlier ones left out;
  6. a repair pass then gives each still uncovered unit (in a seeded order) an item by a same-family, same-label swap
     with a primary pick of the most covered unit that has at least two items (ties in a seeded order): a reserve
     pick of the uncovered unit is promoted (the two exchange ranks), else one of its candidates that keeps min_gap
     from its reserve picks takes the donor's rank. Family counts, label counts (primary and reserve) and min_gap are
     unchanged; a unit that no such swap can reach stays uncovered.

Answer options and letters: pipeline/items/choices.py (the frames stage orders T8/T9 frames, the split assigns letters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import heapq
import math
from collections import defaultdict, deque

import polars as pl

from pipeline.families.common import scale_quota
from pipeline.core.seeding import py_rng
from pipeline.items.shortfall import shortfall  # noqa: F401 - re-exported: selection.shortfall stays valid

if TYPE_CHECKING:
    from pipeline.settings.models import TaskFile
    from pipeline.settings.root import Settings


def _task_order(task_id: str) -> int:
    return int(task_id[1:])


SELECTION_SETTINGS = ("min_gap", "balance_labels", "equal_per_unit")  # per family, from its template


class Quotas(dict):
    """{task_id: quota} of one source, carrying the families' selection settings (`settings[task_id]` =
    {"min_gap": int, "balance_labels": bool, "equal_per_unit": bool}) from the templates, so the selection needs no other config."""

    def __init__(self, data=(), settings: dict | None = None):
        super().__init__(data)
        self.settings: dict[str, dict] = dict(settings or {})


def quotas(cfg: Settings, source: str) -> dict[str, int]:
    """Per-family quota of one source at the configured build scale, in task order (a `Quotas` dict)."""
    build = cfg.build
    scale = float(build.quota_scale[build.scale])
    out, settings = {}, {}
    for tid in cfg.task_ids:
        t = cfg.tasks[tid]
        if source in t.sources and source in t.quota:
            out[tid] = scale_quota(int(t.quota[source]), scale)
            settings[tid] = dict(zip(SELECTION_SETTINGS, _template_settings(t, source)))
    return Quotas(out, settings)


def _quota_for(quotas_: dict, source: str, task_id: str) -> int | None:
    """Quotas may be {task: n} (one source) or {source: {task: n}}."""
    if source in quotas_ and isinstance(quotas_[source], dict):
        return quotas_[source].get(task_id)
    v = quotas_.get(task_id)
    return None if isinstance(v, dict) else v


def _template_settings(t: TaskFile, source: str) -> tuple[int, bool, bool]:
    """min_gap / balance_labels / equal_per_unit of one template for one source (a per-source map without the source:
    0 / False / False)."""
    r = t.for_source(source)
    return int(r.min_gap or 0), bool(r.balance_labels), bool(r.equal_per_unit)


def _family_settings(quotas_: dict, cfg_tasks: dict | None, source: str, task_id: str) -> tuple[int, bool, bool]:
    """min_gap / balance_labels / equal_per_unit: from cfg_tasks when given, else from the Quotas' settings, else
    none."""
    if cfg_tasks is not None:
        return _template_settings(cfg_tasks[task_id], source)
    st = getattr(quotas_, "settings", {}).get(task_id)
    if st is None and isinstance(quotas_.get(source), dict):
        st = getattr(quotas_[source], "settings", {}).get(task_id)
    st = st or {}
    return int(st.get("min_gap", 0)), bool(st.get("balance_labels", False)), bool(st.get("equal_per_unit", False))


def _targets(avail: dict[str, int], total: int) -> dict[str, float]:
    """Water-filling: each label gets an equal share of `total`, capped at what it has."""
    out: dict[str, float] = {}
    left = float(total)
    labels = sorted(avail, key=lambda k: (avail[k], k))
    for i, k in enumerate(labels):
        share = left / (len(labels) - i)
        out[k] = min(float(avail[k]), share)
        left -= out[k]
    return out


def _select_family(
    keys: list[str],
    unit: list[str],
    label: list[str],
    anchor: list[int],
    target: int,
    min_gap: int,
    balance: bool,
    seed: int,
    gkey: tuple,
    prior: list[tuple[str, str, int]] = (),
    cover: dict[str, int] | None = None,
    primary: int | None = None,
    equal: bool = False,
) -> list[int]:
    """Round-robin over units; returns the indices (into the given columns) of the picked candidates, in pick order.
    `prior` = [(unit, label, anchor)] of items of this family taken earlier: they count against min_gap and the
    label shares. `cover` = {unit: items of the source so far}: each pass visits the units with the fewest first, and
    the first `primary` picks (default: all) are added to it. `equal`: the same number of picks from every unit used
    (module docstring, step 7)."""
    r = py_rng(seed, "select", *gkey)
    units: dict[str, dict[str, deque]] = defaultdict(lambda: defaultdict(deque))
    staging: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for i in sorted(range(len(keys)), key=keys.__getitem__):
        staging[unit[i]][label[i] if balance else ""].append(i)
    unit_order = sorted(staging)
    r.shuffle(unit_order)
    avail: dict[str, int] = defaultdict(int)
    for u in unit_order:
        for lab in sorted(staging[u]):
            lst = staging[u][lab]
            r.shuffle(lst)
            units[u][lab] = deque(lst)
            avail[lab] += len(lst)
    taken: dict[str, int] = defaultdict(int)
    taken_frames: dict[str, list[int]] = defaultdict(list)
    for u, lab, a in prior:
        taken[lab if balance else ""] += 1
        taken_frames[u].append(int(a))
    if balance:
        for lab in list(taken):
            avail[lab] += taken[lab]
        shares = _targets(dict(avail), target + len(prior))
    else:
        shares = {"": float(target + len(prior))}
    picked: list[int] = []
    relaxed = not balance

    def fits(u: str, frame: int) -> bool:
        return min_gap <= 0 or all(abs(frame - f) >= min_gap for f in taken_frames[u])

    active = list(unit_order)
    pos = {u: i for i, u in enumerate(unit_order)}
    n_primary = target if primary is None else int(primary)
    goal, target = target, (len(keys) if equal else target)  # equal: run on past the goal, then cut (step 7)
    while len(picked) < target and active:
        if cover is not None:
            active.sort(key=lambda u: (cover.get(u, 0), pos[u]))
        progress = False
        still = []
        for u in active:
            if len(picked) >= target:
                still.append(u)
                continue
            queues = units[u]
            if relaxed:
                order = sorted(queues, key=lambda lab: (taken[lab] - shares.get(lab, 0.0), lab))
            else:
                order = sorted(
                    (lab for lab in queues if taken[lab] < shares[lab] - 1e-9),
                    key=lambda lab: (taken[lab] - shares[lab], lab),
                )
            got = None
            for lab in order:
                q = queues[lab]
                while q and not fits(u, anchor[q[0]]):
                    q.popleft()  # conflicts only grow: a skipped candidate can never fit later
                if q:
                    got = q.popleft()
                    taken[lab] += 1
                    break
            if got is not None:
                taken_frames[u].append(anchor[got])
                picked.append(got)
                progress = True
                if cover is not None and not equal and len(picked) <= n_primary:
                    cover[u] = cover.get(u, 0) + 1
            if any(queues.values()):
                still.append(u)
        active = still
        if not progress:
            if relaxed:
                break
            relaxed = True  # no label below its share can be taken any more: fill from any label
    if not equal:
        return picked
    picked = equal_per_unit(picked, unit, label if balance else [""] * len(unit), goal)
    if cover is not None:
        for i in picked[:n_primary]:
            cover[unit[i]] = cover.get(unit[i], 0) + 1
    return picked


def equal_per_unit(picked: list[int], unit: list[str], label: list[str], goal: int) -> list[int]:
    """The picks (in pick order) cut so that every unit kept gives the same number k of them, its first k. A unit
    counts for its dominant label among those k. k and the number of units m <= goal // k are those that give the most
    label-balanced items (k x L x the fewest units any of the L labels has, capped at m // L), then the most items
    k*m, then the smaller k; the m units are dealt over the labels water-filled (each label's units in first-pick
    order). Returns the kept picks in pick order."""
    per_unit: dict[str, list[int]] = defaultdict(list)
    for i in picked:
        per_unit[unit[i]].append(i)
    if not per_unit or goal <= 0:
        return []

    def by_label(k: int) -> dict[str, deque]:
        out: dict[str, deque] = defaultdict(deque)
        for u, idx in per_unit.items():  # dict order = first-pick order
            if len(idx) >= k:
                first = [label[i] for i in idx[:k]]
                out[max(sorted(set(first)), key=first.count)].append(u)
        return out

    best, best_k = (0, 0, 0), 0
    for k in range(1, max(len(v) for v in per_unit.values()) + 1):
        units = by_label(k)
        m = min(sum(len(q) for q in units.values()), goal // k)
        balanced = k * len(units) * min(min(len(q) for q in units.values()), m // len(units)) if units else 0
        if (balanced, k * m) > best[:2]:
            best, best_k = (balanced, k * m, m), k
    m, k = best[2], best_k
    if not m:
        return []
    units = by_label(k)
    shares = _targets({lab: len(q) for lab, q in units.items()}, m)
    taken = {lab: 0 for lab in units}
    kept: set[str] = set()
    while len(kept) < m:
        open_ = [lab for lab in units if units[lab] and taken[lab] < shares[lab] - 1e-9] or [
            lab for lab in units if units[lab]
        ]  # fractional shares: the next unit of any label
        lab = min(open_, key=lambda lab: (taken[lab] - shares[lab], lab))
        kept.add(units[lab].popleft())
        taken[lab] += 1
    keep = {i for u in kept for i in per_unit[u][:k]}
    return [i for i in picked if i in keep]


class _Family:
    """One family's columns and picks while a source is selected (the coverage repair swaps inside `picked`)."""

    __slots__ = ("task_id", "keys", "unit", "label", "anchor", "min_gap", "balance", "quota", "picked", "equal")

    def __init__(self, task_id, keys, unit, label, anchor, min_gap, balance, quota, picked, equal=False):
        self.task_id, self.keys, self.unit, self.label, self.anchor = task_id, keys, unit, label, anchor
        self.min_gap, self.balance, self.quota, self.picked, self.equal = min_gap, balance, quota, picked, equal

    def lab(self, i: int) -> str:
        return self.label[i] if self.balance else ""


def _repair_coverage(fams: list[_Family], cover: dict[str, int], seed: int, source: str) -> int:
    """Give each unit with candidates but no item (cover 0) one, by a same-family, same-label swap with a primary pick
    of the most covered unit with >= 2 items (module docstring, step 6). Updates `picked` and `cover`; returns the
    number of units it covered."""
    cand_units = sorted({u for f in fams for u in f.unit})
    uncovered = [u for u in cand_units if not cover.get(u, 0)]
    if not uncovered:
        return 0
    r = py_rng(seed, "cover", source)
    order = list(cand_units)
    r.shuffle(order)
    tie = {u: i for i, u in enumerate(order)}
    uncovered.sort(key=tie.__getitem__)
    # donors[(fam, label)][unit] = positions (in fam.picked, < quota) of its primary picks; heaps of units by cover
    donors: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for fi, f in enumerate(fams):
        if f.equal:
            continue  # a swap would change two units' counts (step 7)
        for p in range(min(f.quota, len(f.picked))):
            i = f.picked[p]
            donors[(fi, f.lab(i))][f.unit[i]].append(p)
    heaps: dict[tuple[int, str], list] = {}
    for k, per_unit in donors.items():
        heaps[k] = [(-cover.get(v, 0), tie[v], v) for v in per_unit if cover.get(v, 0) >= 2]
        heapq.heapify(heaps[k])

    def donor(k: tuple[int, str]) -> str | None:
        h = heaps.get(k)
        while h:
            c, t, v = h[0]
            cur = cover.get(v, 0)
            if cur < 2 or not donors[k].get(v):
                heapq.heappop(h)
            elif -c != cur:  # its cover fell since it was pushed
                heapq.heapreplace(h, (-cur, t, v))
            else:
                return v
        return None

    def take(k: tuple[int, str], v: str) -> int:
        lst = donors[k][v]
        p = max(lst)  # the donor's latest primary pick
        lst.remove(p)
        cover[v] -= 1
        return p

    todo = set(uncovered)
    cands_of: list[dict[str, list[int]]] = []  # per family: uncovered unit -> its candidates
    picks_of: list[dict[str, dict[int, int]]] = []  # per family: uncovered unit -> {candidate: position in picked}
    for f in fams:
        c: dict[str, list[int]] = defaultdict(list)
        for i, u in enumerate(f.unit):
            if u in todo:
                c[u].append(i)
        pk: dict[str, dict[int, int]] = defaultdict(dict)
        for p, i in enumerate(f.picked):
            if f.unit[i] in todo:
                pk[f.unit[i]][i] = p  # reserve picks only (p >= quota): the unit has no primary pick
        cands_of.append(c)
        picks_of.append(pk)

    fixed = 0
    for u in uncovered:
        done = False
        for fi, f in enumerate(fams):
            idx = cands_of[fi].get(u)
            if not idx:
                continue
            where = picks_of[fi].get(u, {})
            # (a) promote a reserve pick of u: it and the donor's primary pick exchange ranks
            for i, p_r in sorted(where.items(), key=lambda kv: kv[1]):
                k = (fi, f.lab(i))
                v = donor(k)
                if v is not None:
                    p_x = take(k, v)
                    f.picked[p_x], f.picked[p_r] = f.picked[p_r], f.picked[p_x]
                    done = True
                    break
            if not done:
                # (b) a candidate of u (seeded order) that keeps min_gap from u's reserve picks replaces the donor's pick
                frames = [f.anchor[i] for i in where]
                cands = sorted((i for i in idx if i not in where), key=f.keys.__getitem__)
                py_rng(seed, "cover", source, f.task_id, u).shuffle(cands)
                for i in cands:
                    if f.min_gap > 0 and any(abs(f.anchor[i] - a) < f.min_gap for a in frames):
                        continue
                    k = (fi, f.lab(i))
                    v = donor(k)
                    if v is not None:
                        f.picked[take(k, v)] = i
                        done = True
                        break
            if done:
                cover[u] = cover.get(u, 0) + 1
                fixed += 1
                break
    return fixed


def select_candidates(
    pool: pl.DataFrame,
    quotas: dict,
    seed: int,
    exclude_keys=frozenset(),
    extra: float = 0.0,
    cfg_tasks: dict | None = None,
    prior: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Pick each family's quota (x (1 + extra)) from the pool, spread over units and time, covering every unit of a
    source the quotas allow (see the module docstring).
    min_gap / balance_labels come from `cfg_tasks` (cfg.tasks) when given, else from the settings that
    `quotas()` attaches to its result; a plain dict of quotas means no gap and no label balance.
    `prior`: items already kept in earlier rounds (columns source, task_id, unit_id, answer_text, anchor_frame); new
    picks keep min_gap from them, the label shares count them (quotas are then the numbers still needed), and the
    units they are in count as covered.
    Returns the selected rows (the pool's columns + select_rank), sorted by (source, task, candidate_key)."""
    out_schema = {**dict(pool.schema), "select_rank": pl.Int64}
    if pool.height == 0:
        return pl.DataFrame(schema=out_schema)
    excl = set(exclude_keys or ())
    picked_keys: list[str] = []
    picked_rank: list[int] = []
    slim = pool.select("candidate_key", "source", "task_id", "unit_id", "answer_text", "anchor_frame")
    groups = slim.partition_by(["source", "task_id"], as_dict=True, maintain_order=True)
    has_prior = prior is not None and prior.height > 0
    for source in sorted({s for s, _ in groups}):
        cover: dict[str, int] = defaultdict(int)
        if has_prior:
            for u in prior.filter(pl.col("source") == source)["unit_id"].to_list():
                cover[u] += 1
        fams: list[_Family] = []
        for task_id in sorted((t for s, t in groups if s == source), key=_task_order):
            q = _quota_for(quotas, source, task_id)
            if not q:
                continue
            df = groups[(source, task_id)]
            if excl:
                df = df.filter(~pl.col("candidate_key").is_in(list(excl)))
            if df.height == 0:
                continue
            keys = df.get_column("candidate_key").to_list()
            unit = df.get_column("unit_id").to_list()
            label = df.get_column("answer_text").to_list()
            anchor = df.get_column("anchor_frame").to_list()
            min_gap, balance, equal = _family_settings(quotas, cfg_tasks, source, task_id)
            target = int(math.ceil(q * (1.0 + float(extra)) - 1e-9))
            before: list[tuple[str, str, int]] = []
            if has_prior:
                pr = prior.filter((pl.col("source") == source) & (pl.col("task_id") == task_id))
                before = list(zip(pr["unit_id"].to_list(), pr["answer_text"].to_list(), pr["anchor_frame"].to_list()))
            idx = _select_family(
                keys,
                unit,
                label,
                anchor,
                target,
                min_gap,
                balance,
                seed,
                (source, task_id),
                before,
                cover=cover,
                primary=int(q),
                equal=equal,
            )
            fams.append(_Family(task_id, keys, unit, label, anchor, min_gap, balance, int(q), idx, equal))
        _repair_coverage(fams, cover, seed, source)
        for f in fams:
            picked_keys.extend(f.keys[i] for i in f.picked)
            picked_rank.extend(range(len(f.picked)))
    if not picked_keys:
        return pl.DataFrame(schema=out_schema)
    sel = pl.DataFrame(
        {"candidate_key": picked_keys, "select_rank": picked_rank},
        schema={"candidate_key": pl.String, "select_rank": pl.Int64},
    )
    out = pool.join(sel, on="candidate_key", how="inner")
    return (
        out.with_columns(_o=pl.col("task_id").str.slice(1).cast(pl.Int64))
        .sort(["source", "_o", "candidate_key"])
        .drop("_o")
        .select(list(out_schema))
    )
