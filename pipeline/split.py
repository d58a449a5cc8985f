"""The split stage: isolation groups, the stratified eval selection, optional out-of-distribution eval levels.

Pure functions over tables (no Dagster), configured by configs/split.yaml (`cfg["split"]`, here called `policy`).

    groups = build_groups(items, units, policy)             # (source, unit_id) -> split_group_id (union-find merges)
    out, summary = split_items(items, groups, policy, seed)  # + split, split_group_id (, eval_level)
    leaked_groups(out) == []                                 # isolation check
    group_lists(out)                                         # {"eval": [...], "sft": [...]} for metadata/*.txt
    split_pool_file(pool_jsonl, out_dir, config_file)        # `processbench split --items POOL.jsonl --out DIR`

Selection, per source (release-and-peers.md §D.5): the number of eval groups is max(1, round(eval_ratio × groups))
with Python's round, as the public script. Both rules minimise the public objective J over the eval group set S

    J(S) = Σ_t w_t·|n_t − r·N_t| / max(r·N_t, 1) + zero_penalty·w_t·[r·N_t ≥ 1 ∧ n_t = 0]
           + items_weight·|n − r·N| / max(r·N, 1)

* `public_rule` re-implements the public script's search: greedy from a shuffled order, at most `swap_passes` best
  swaps among the top-`swap_candidates` groups each way (ranked by Σ_t w_t·count·deficit/target), `restarts`
  restarts seeded from random.Random(42), keep the best. Numerically it sums J in a fixed family order (the public
  script sums in the pool's first-seen order), so ties decided in the last bit may differ; the algorithm is the same.
* `our_rule` (default), shares first, letters second. Phase 1 minimises J: exact search over every eval set when
  C(groups, m) ≤ exact_max_combinations (REASSEMBLE: C(37,6)), otherwise best-swap sweeps from the public set and
  seeded random sets (random starts escape the greedy basin the public rule ends in). Phase 2 minimises
  J + letter_weight·(L + letter_l1_weight·L1) under J ≤ cap = min(J_public, J_phase1 + share_slack), with
  L = Σ_t w_t·(k_t·majority_letter_share_t − 1) (0 = every answer letter equally frequent in eval) and L1 the
  letters' L1 distance from uniform (a smooth companion that guides the search), by sweeps from every phase-1
  optimum, iterated local search (random kicks + sweeps) on the best, and the public set itself if it is within the
  cap and better. Hence J(ours) ≤ J(public) on the same pool, always; and when the public set was within the cap
  (else J(ours) < J(public)), J + λ·(L + μ·L1) is no worse either: ours never loses on both. Iteration counts
  come from work budgets divided by m·(groups − m), so they depend on the pool, never on the clock. Objective comparisons are quantised to 1e-10, ties go to the lowest index, and
  every RNG derives from (seed, stage, source): the result does not hinge on the last bit of a float sum.

Group ids: a unit's group is its unit_id (the public release) unless the policy merges units sharing a stricter key
(`merge_keys`): a merged group is named "<key>=<smallest value of key in the group>" (first listed key the group
has a value of). Merged ids contain "=" and never collide with unit ids.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from .config import CONFIG_DIR
from .io import atomic_write_text, compact_json, write_json
from .seeding import rng as np_rng

LETTERS = "ABCDEF"
UNIT_KEYS = ("task_id", "operator_id", "scene_id", "config_id", "taxonomy")
_EPS = 1e-12
_Q = 10  # decimals objective comparisons are quantised to in our rule
_SUMMARY_DECIMALS = 6


# ------------------------------------------------------------------------------------------------ policy helpers
def _read_split_yaml(path: Path) -> dict:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return data.get("split", data) if isinstance(data, dict) else {}


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_policy(config_file: Path | None = None) -> tuple[dict, int]:
    """The split policy and seed: configs/split.yaml, with `config_file` (YAML shaped like it, with or without the
    top-level `split:` key; may be partial) merged over it. A null seed falls back to build.yaml's release_seed."""
    default = CONFIG_DIR / "split.yaml"
    policy = _read_split_yaml(default) if default.exists() else {}
    if config_file:
        policy = _deep_merge(policy, _read_split_yaml(Path(config_file)))
    seed = policy.get("seed")
    if seed is None:
        build_file = CONFIG_DIR / "build.yaml"
        build = {}
        if build_file.exists():
            build = (yaml.safe_load(build_file.read_text(encoding="utf-8")) or {}).get("build", {})
        seed = build.get("release_seed", 42)
    return policy, int(seed)


def n_eval_groups(n_groups: int, eval_ratio: float) -> int:
    """max(1, round(n × ratio)) with Python's (half-even) round, exactly the public rule; 0 for an empty pool."""
    if n_groups <= 0:
        return 0
    return min(n_groups, max(1, round(n_groups * float(eval_ratio))))


def _source_policy(policy: dict, source: str) -> dict:
    base = dict(policy.get("default_source") or {})
    base.update((policy.get("sources") or {}).get(source) or {})
    base.setdefault("group_unit", "split_group_id")
    base.setdefault("merge_keys", [])
    base.setdefault("task_weights", {})
    return base


def family_sort_key(fam: str) -> tuple:
    m = re.fullmatch(r"T(\d+)", str(fam))
    return (0, int(m.group(1)), "") if m else (1, 0, str(fam))


# ------------------------------------------------------------------------------------------------ groups
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


def build_groups(items: pl.DataFrame, units: pl.DataFrame | None, policy: dict) -> pl.DataFrame:
    """One row per (source, unit_id) of `items` ∪ `units` with its split_group_id, plus the unit keys used by OOD
    levels (`unit_task_id` = the upstream task, operator_id, scene_id, config_id, taxonomy; null when unknown).

    Default: group = unit. `policy["sources"][slug]["merge_keys"]` merges units sharing a value of any listed key
    (union-find, transitive); see the module docstring for the merged id."""
    cols = ["source", "unit_id", *UNIT_KEYS]
    frames = []
    if units is not None and units.height:
        u = units.select([pl.col(c).cast(pl.String) if c in units.columns else pl.lit(None, pl.String).alias(c)
                          for c in cols])
        frames.append(u)
    if items is not None and items.height:
        it = items.select("source", "unit_id").unique().with_columns(
            [pl.lit(None, pl.String).alias(c) for c in UNIT_KEYS])
        frames.append(it.select(cols))
    if not frames:
        return pl.DataFrame(schema={"source": pl.String, "unit_id": pl.String, "split_group_id": pl.String,
                                    **{("unit_task_id" if c == "task_id" else c): pl.String for c in UNIT_KEYS}})
    # the units table wins over the bare (source, unit_id) rows of items
    table = (pl.concat(frames).with_row_index("__o")
             .sort("__o").unique(subset=["source", "unit_id"], keep="first", maintain_order=True)
             .drop("__o").sort("source", "unit_id"))
    out = []
    for source in table["source"].unique().sort().to_list():
        sub = table.filter(pl.col("source") == source)
        keys = [k for k in _source_policy(policy, source)["merge_keys"] if k in UNIT_KEYS]
        unit_ids = sub["unit_id"].to_list()
        gid = list(unit_ids)
        if keys:
            uf = _UnionFind(len(unit_ids))
            for k in keys:
                first: dict[str, int] = {}
                for i, v in enumerate(sub[k].to_list()):
                    if v is None or v == "":
                        continue
                    if v in first:
                        uf.union(first[v], i)
                    else:
                        first[v] = i
            members: dict[int, list[int]] = {}
            for i in range(len(unit_ids)):
                members.setdefault(uf.find(i), []).append(i)
            key_vals = {k: sub[k].to_list() for k in keys}
            for mem in members.values():
                if len(mem) == 1:
                    continue
                name = None
                for k in keys:
                    vals = sorted(v for v in (key_vals[k][i] for i in mem) if v not in (None, ""))
                    if vals:
                        name = f"{k}={vals[0]}"
                        break
                for i in mem:
                    gid[i] = name
        out.append(sub.with_columns(pl.Series("split_group_id", gid, dtype=pl.String)))
    res = pl.concat(out).rename({"task_id": "unit_task_id"})
    return res.select("source", "unit_id", "split_group_id", "unit_task_id", *UNIT_KEYS[1:]).sort("source", "unit_id")


# ------------------------------------------------------------------------------------------------ the pool
@dataclass
class SplitPool:
    """One source's selection problem: per-group family counts (and answer-letter counts), targets and weights."""

    source: str
    group_ids: list[str]                 # sorted
    families: list[str]                  # T1.. in natural order
    counts: np.ndarray                   # (n, T) items per group and family
    letters: np.ndarray | None           # (6, n, T) answer letters A-F per group and family (None: no answers)
    num_choices: np.ndarray              # (T,) choices per family (letter term: k·majority share − 1)
    weights: np.ndarray                  # (T,)
    eval_ratio: float
    zero_penalty: float = 2.5
    items_weight: float = 0.35
    n_eval: int = 0
    target: np.ndarray = field(init=False)
    target_total: float = field(init=False)
    sizes: np.ndarray = field(init=False)

    def __post_init__(self):
        self.counts = np.asarray(self.counts, dtype=np.float64).reshape(len(self.group_ids), len(self.families))
        tot = self.counts.sum(0)
        self.target = tot * float(self.eval_ratio)
        self.target_total = float(tot.sum()) * float(self.eval_ratio)
        self.sizes = self.counts.sum(1)
        self._scale = self.weights / np.maximum(self.target, 1.0)
        self._zero = np.where(self.target >= 1.0, self.zero_penalty * self.weights, 0.0)
        if self.letters is not None:
            self.letters = np.asarray(self.letters, dtype=np.float64)
        self._letter_mask = (np.arange(len(LETTERS))[:, None] < np.asarray(self.num_choices)[None, :]).astype(float)
        if not self.n_eval:
            self.n_eval = n_eval_groups(len(self.group_ids), self.eval_ratio)

    @property
    def n(self) -> int:
        return len(self.group_ids)

    # J for a batch of eval count vectors C (..., T) with item totals tot (...)
    def share_obj(self, C: np.ndarray, tot) -> np.ndarray:
        dev = np.abs(C - self.target) @ self._scale + (C <= 0) @ self._zero
        return dev + self.items_weight * np.abs(tot - self.target_total) / max(self.target_total, 1.0)

    # L for eval letter counts Lc (6, T) or a batch (6, B, T): letters on the first axis (fast reductions)
    def letter_obj(self, Lc: np.ndarray) -> np.ndarray:
        n = Lc.sum(0)
        ex = np.where(n > 0, self.num_choices * Lc.max(0) / np.maximum(n, 1.0) - 1.0, 0.0)
        return ex @ self.weights

    # the letters' L1 distance from uniform, Σ_t w_t·k_t·Σ_l |c_tl − n_t/k_t| / (2·n_t): the search's smooth companion
    def letter_l1(self, Lc: np.ndarray) -> np.ndarray:
        n = Lc.sum(0)
        k = self.num_choices
        mask = self._letter_mask if Lc.ndim == 2 else self._letter_mask[:, None, :]
        dev = np.abs(Lc - (n / k)[None]) * mask
        ex = np.where(n > 0, dev.sum(0) * k / (2.0 * np.maximum(n, 1.0)), 0.0)
        return ex @ self.weights

    def evaluate(self, mask: np.ndarray) -> dict:
        mask = np.asarray(mask, dtype=bool)
        C = self.counts[mask].sum(0)
        J = float(self.share_obj(C, C.sum()))
        L = float(self.letter_obj(self.letters[:, mask, :].sum(1))) if self.letters is not None else 0.0
        return {"share": J, "letters": L}


@dataclass
class Selection:
    mask: np.ndarray                     # (n,) bool, True = eval
    share: float                         # J
    letters: float                       # L (0 without answers)
    method: str

    def eval_groups(self, pool: SplitPool) -> list[str]:
        return [g for g, m in zip(pool.group_ids, self.mask) if m]


def make_pool(items: pl.DataFrame, policy: dict, source: str | None = None, group_col: str = "split_group_id",
              families: list[str] | None = None) -> SplitPool:
    """The selection problem of one source's items (columns task_id, `group_col`, optional answer, num_choices)."""
    source = source or (items["source"][0] if "source" in items.columns and items.height else "")
    sp = _source_policy(policy, source)
    obj = policy.get("objective") or {}
    gids = sorted(set(items[group_col].to_list()))
    fams = families or sorted(set(items["task_id"].to_list()), key=family_sort_key)
    gi = {g: i for i, g in enumerate(gids)}
    fi = {f: i for i, f in enumerate(fams)}
    counts = np.zeros((len(gids), len(fams)))
    g_idx = np.array([gi[g] for g in items[group_col].to_list()], dtype=np.int64)
    f_idx = np.array([fi[f] for f in items["task_id"].to_list()], dtype=np.int64)
    np.add.at(counts, (g_idx, f_idx), 1.0)
    letters = None
    k = np.zeros(len(fams))
    if "answer" in items.columns and items["answer"].drop_nulls().len():
        ans = items["answer"].to_list()
        l_idx = np.array([LETTERS.find(a) if isinstance(a, str) and len(a) == 1 else -1 for a in ans], dtype=np.int64)
        ok = l_idx >= 0
        letters = np.zeros((len(LETTERS), len(gids), len(fams)))
        np.add.at(letters, (l_idx[ok], g_idx[ok], f_idx[ok]), 1.0)
        if "num_choices" in items.columns:
            nc = items["num_choices"].to_list()
            for f, c in zip(f_idx, nc):
                if c is not None:
                    k[f] = max(k[f], int(c))
        for t in range(len(fams)):  # fall back on the letters seen
            if k[t] == 0:
                seen = np.flatnonzero(letters[:, :, t].sum(1))
                k[t] = (seen.max() + 1) if seen.size else 1
    weights = np.array([float((sp.get("task_weights") or {}).get(f, 1.0)) for f in fams])
    return SplitPool(source=source, group_ids=gids, families=fams, counts=counts, letters=letters,
                     num_choices=np.maximum(k, 1.0), weights=weights, eval_ratio=float(policy.get("eval_ratio", 0.15)),
                     zero_penalty=float(obj.get("zero_penalty", 2.5)),
                     items_weight=float(obj.get("items_weight", 0.35)))


# ------------------------------------------------------------------------------------------------ public rule
def _first_best(scores: np.ndarray, best: float | None = None) -> int | None:
    """The public script's scan: walk in order, take a candidate when it beats the best so far by more than 1e-12
    (the first candidate is taken when `best` is None). Returns the index, or None if nothing beats `best`."""
    m = int(np.argmin(scores))
    lo = scores[m]
    if not np.isfinite(lo) or (best is not None and not lo < best - _EPS):
        return None
    near = (scores > lo) & (scores <= lo + _EPS)
    if best is None and not near.any():
        return m
    chosen, cur = None, best
    for i, s in enumerate(scores.tolist()):
        if not math.isfinite(s):
            continue
        if cur is None or s < cur - _EPS:
            chosen, cur = i, s
    return chosen


def _public_greedy(pool: SplitPool, order: list[int]) -> np.ndarray:
    order_a = np.asarray(order, dtype=np.int64)
    Co, So = pool.counts[order_a], pool.sizes[order_a]
    avail = np.ones(pool.n, dtype=bool)
    C, tot = np.zeros(len(pool.families)), 0.0
    for _ in range(pool.n_eval):
        sc = pool.share_obj(C + Co, tot + So)
        sc[~avail] = np.inf
        pos = _first_best(sc)
        if pos is None:
            break
        avail[pos] = False
        C, tot = C + Co[pos], tot + So[pos]
    mask = np.zeros(pool.n, dtype=bool)
    mask[order_a[~avail]] = True
    return mask


def _public_swaps(pool: SplitPool, mask: np.ndarray, passes: int, limit: int) -> tuple[np.ndarray, float]:
    mask = mask.copy()
    C = pool.counts[mask].sum(0)
    tot = float(C.sum())
    score = float(pool.share_obj(C, tot))
    for _ in range(max(0, passes)):
        sel, uns = np.flatnonzero(mask), np.flatnonzero(~mask)
        if not sel.size or not uns.size:
            break
        delta = pool.counts @ (pool.weights * (pool.target - C) / np.maximum(pool.target, 1.0))
        outs = sel[np.lexsort((sel, delta[sel]))][:max(1, min(len(sel), limit))]        # ascending (delta, id)
        ins = uns[np.lexsort((-uns, -delta[uns]))][:max(1, min(len(uns), limit))]       # descending (delta, id)
        C2 = C[None, None, :] - pool.counts[outs][:, None, :] + pool.counts[ins][None, :, :]
        t2 = tot - pool.sizes[outs][:, None] + pool.sizes[ins][None, :]
        sc = pool.share_obj(C2, t2).ravel()
        pick = _first_best(sc, best=score)
        if pick is None:
            break
        o, i = outs[pick // len(ins)], ins[pick % len(ins)]
        mask[o], mask[i] = False, True
        C, tot, score = C2.reshape(-1, C.size)[pick], float(t2.ravel()[pick]), float(sc[pick])
    return mask, score


def public_rule(pool: SplitPool, policy: dict) -> Selection:
    """The public script's selection on `pool`: greedy + pairwise swaps + restarts, random.Random(seed=42)."""
    cfg = policy.get("public_rule") or {}
    seed, restarts = int(cfg.get("seed", 42)), int(cfg.get("restarts", 8))
    passes, limit = int(cfg.get("swap_passes", 4)), int(cfg.get("swap_candidates", 24))
    if pool.n == 0:
        return Selection(np.zeros(0, dtype=bool), 0.0, 0.0, "public")
    root = random.Random(seed)
    best_mask, best = None, None
    for r in range(max(1, restarts)):
        local = random.Random(root.randint(0, 10**12) + r)
        order = list(range(pool.n))
        local.shuffle(order)
        mask = _public_greedy(pool, order)
        mask, score = _public_swaps(pool, mask, passes, limit)
        if best is None or score < best - _EPS:
            best_mask, best = mask, score
    return Selection(best_mask, float(best), pool.evaluate(best_mask)["letters"], "public")


# ------------------------------------------------------------------------------------------------ our rule
def _q(x):
    return np.round(x, _Q)


class _State:
    """An eval set with running family/letter counts and its search objective
    K = J + lam·(L + mu·L1) + rho·max(0, J − cap)   (L1: the letters' L1 distance from uniform, a smooth companion
    of the majority-share term L that guides the search off its plateaus)."""

    def __init__(self, pool: SplitPool, mask: np.ndarray, lam: float = 0.0, mu: float = 0.0,
                 cap: float = math.inf, rho: float = 0.0, top: int = 64):
        self.pool, self.lam, self.mu, self.cap, self.rho, self.top = pool, lam, mu, cap, rho, max(1, int(top))
        self.use_letters = lam > 0 and pool.letters is not None
        self.mask = np.asarray(mask, dtype=bool).copy()
        self.C = pool.counts[self.mask].sum(0)
        self.tot = float(self.C.sum())
        self.Lc = pool.letters[:, self.mask, :].sum(1) if self.use_letters else None
        self.J = float(pool.share_obj(self.C, self.tot))
        self.K = float(self.objective(np.asarray(self.J), self.Lc))

    def objective(self, J: np.ndarray, Lc: np.ndarray | None) -> np.ndarray:
        K = J + self.rho * np.maximum(0.0, J - self.cap) if self.rho else J
        if self.use_letters:
            K = K + self.lam * self.pool.letter_obj(Lc)
            if self.mu:
                K = K + self.lam * self.mu * self.pool.letter_l1(Lc)
        return K

    def copy(self) -> "_State":
        new = object.__new__(_State)
        new.__dict__.update(self.__dict__)
        new.mask, new.C = self.mask.copy(), self.C.copy()
        new.Lc = None if self.Lc is None else self.Lc.copy()
        return new

    def swap(self, o: int, i: int) -> None:
        p = self.pool
        self.mask[o], self.mask[i] = False, True
        self.C = self.C - p.counts[o] + p.counts[i]
        self.tot += p.sizes[i] - p.sizes[o]
        if self.use_letters:
            self.Lc = self.Lc - p.letters[:, o, :] + p.letters[:, i, :]
        self.J = float(p.share_obj(self.C, self.tot))
        self.K = float(self.objective(np.asarray(self.J), self.Lc))

    def sweep(self, rng: np.random.Generator, max_sweeps: int) -> None:
        """First improvement over the eval groups (seeded order), each replaced by the best non-eval group."""
        p = self.pool
        for _ in range(max(0, max_sweeps)):
            improved = False
            outs = np.flatnonzero(self.mask)
            rng.shuffle(outs)
            for o in outs:
                uns = np.flatnonzero(~self.mask)
                if not uns.size:
                    return
                C2 = (self.C - p.counts[o])[None, :] + p.counts[uns]
                J2 = p.share_obj(C2, self.tot - p.sizes[o] + p.sizes[uns])
                if self.use_letters:
                    if uns.size > self.top:  # letters only for the `top` best replacements by J
                        keep = np.argsort(_q(J2), kind="stable")[:self.top]
                        uns, J2 = uns[keep], J2[keep]
                    Lc2 = (self.Lc - p.letters[:, o, :])[:, None, :] + p.letters[:, uns, :]
                    K2 = _q(self.objective(J2, Lc2))
                else:
                    K2 = _q(J2)
                j = int(np.argmin(K2))
                if K2[j] < _q(self.K):
                    self.swap(int(o), int(uns[j]))
                    improved = True
            if not improved:
                return

    def kick(self, rng: np.random.Generator, swaps: int) -> None:
        for _ in range(swaps):
            sel, uns = np.flatnonzero(self.mask), np.flatnonzero(~self.mask)
            if not sel.size or not uns.size:
                return
            self.swap(int(sel[rng.integers(sel.size)]), int(uns[rng.integers(uns.size)]))


def _share_cap(cfg: dict, j_public: float, j_star: float, slack: float) -> float:
    """The bound on J while balancing letters: J* + slack, and never above the public rule's J (cap_at_public)."""
    cap = j_star + slack
    return min(j_public, cap) if cfg.get("cap_at_public", True) else cap


def _exact(pool: SplitPool, lam: float, mu: float, cap_public: float, slack: float, chunk: int,
           cfg: dict | None = None, public_mask: np.ndarray | None = None) -> Selection:
    """Every eval set of size m: phase 1 min J, then min J + lam·(L + mu·L1) subject to J ≤ min(cap_public, J* + slack).
    With `families_not_worse_than_public` (and the public set given), only sets where no family's eval count is
    farther from its target than under the public rule are eligible (the public set itself always is).
    Ties go to the first set in lexicographic order of group indices."""
    cfg = cfg or {}
    n, m = pool.n, pool.n_eval
    dtype = np.int16 if n < 2**15 else np.int32
    dominance = public_mask is not None and bool(cfg.get("families_not_worse_than_public", False))
    if dominance:
        limit = np.abs(pool.counts[public_mask].sum(0) - pool.target) + 1e-9
    combos_all, J_all = [], []
    it = itertools.combinations(range(n), m)
    while True:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.islice(it, chunk)), dtype=dtype)
        if not flat.size:
            break
        idx = flat.reshape(-1, m)
        C = pool.counts[idx[:, 0]]
        for c in range(1, m):
            C = C + pool.counts[idx[:, c]]
        J = _q(pool.share_obj(C, C.sum(1)))
        if dominance:  # ineligible sets never win: J = inf
            J = np.where((np.abs(C - pool.target) <= limit).all(1), J, np.inf)
        J_all.append(J)
        combos_all.append(idx)
    combos = np.concatenate(combos_all)
    J = np.concatenate(J_all)
    best = int(np.argmin(J))
    if lam > 0 and pool.letters is not None:
        cap = _q(_share_cap(cfg, cap_public, float(J[best]), slack))
        feas = np.flatnonzero(J <= cap)  # ascending: keeps the lexicographic tie order
        K = np.empty(feas.size)
        for s in range(0, feas.size, chunk):
            idx = combos[feas[s:s + chunk]].astype(np.int64)
            Lc = pool.letters[:, idx[:, 0], :]
            for c in range(1, m):
                Lc = Lc + pool.letters[:, idx[:, c], :]
            K[s:s + chunk] = _q(J[feas[s:s + chunk]] + lam * (pool.letter_obj(Lc) + mu * pool.letter_l1(Lc)))
        best = int(feas[int(np.argmin(K))])
    mask = np.zeros(n, dtype=bool)
    mask[combos[best].astype(np.int64)] = True
    ev = pool.evaluate(mask)
    return Selection(mask, ev["share"], ev["letters"], "exact")


def _budget(cfg: dict, name: str, cost: int, lo: int, hi: int) -> int:
    """Iterations from a fixed work budget (so the count depends on the pool's size, never on the clock)."""
    return int(min(int(cfg.get(f"max_{name}", hi)), max(int(cfg.get(f"min_{name}", lo)),
                                                         int(float(cfg.get(f"{name}_budget", 0)) // max(cost, 1)))))


def our_rule(pool: SplitPool, policy: dict, seed: int, baseline: Selection | None = None) -> Selection:
    """Our selection: J(ours) ≤ J(public) on the same pool, then balanced answer letters (module docstring)."""
    cfg = policy.get("ours") or {}
    lam = float((policy.get("objective") or {}).get("letter_weight", 1.0)) if pool.letters is not None else 0.0
    mu = float(cfg.get("letter_l1_weight", 0.5))
    if pool.n == 0:
        return Selection(np.zeros(0, dtype=bool), 0.0, 0.0, "empty")
    baseline = baseline or public_rule(pool, policy)
    slack = float(cfg.get("share_slack", 0.01))
    if math.comb(pool.n, pool.n_eval) <= int(cfg.get("exact_max_combinations", 3_000_000)):
        return _exact(pool, lam, mu, baseline.share, slack, int(cfg.get("exact_chunk", 100_000)), cfg,
                      public_mask=baseline.mask)

    sweeps, rho = int(cfg.get("max_sweeps", 50)), float(cfg.get("cap_penalty", 100.0))
    top = int(cfg.get("letter_candidates", 64))
    cost = pool.n_eval * (pool.n - pool.n_eval)
    restarts = _budget(cfg, "restarts", cost, 1, 48)
    # phase 1, the share objective J: the public set, then seeded random sets, each to a swap-local optimum
    phase1 = []
    for r in range(restarts):
        if r == 0:
            start = baseline.mask
        else:
            start = np.zeros(pool.n, dtype=bool)
            start[np_rng(seed, "split-start", pool.source, r).permutation(pool.n)[:pool.n_eval]] = True
        st = _State(pool, start)
        st.sweep(np_rng(seed, "split-phase1", pool.source, r), sweeps)
        phase1.append(st)
    j_star = min(_q(st.J) for st in phase1)
    cap = _share_cap(cfg, baseline.share, float(j_star), slack)
    if lam <= 0:
        best = min(phase1, key=lambda s: _q(s.J))  # first of the minima
    else:
        # phase 2, J + lam·letters under J ≤ cap, from every phase-1 optimum; then iterated local search on the best
        best = None
        for r, st1 in enumerate(phase1):
            st = _State(pool, st1.mask, lam, mu, cap, rho, top)
            st.sweep(np_rng(seed, "split-phase2", pool.source, r), sweeps)
            if _q(st.J) <= _q(cap) and (best is None or _q(st.K) < _q(best.K)):
                best = st
        if best is None:  # cannot happen (the phase-1 optimum is feasible); keep the guarantee explicit
            best = _State(pool, min(phase1, key=lambda s: _q(s.J)).mask, lam, mu, cap, rho, top)
        r_ils = np_rng(seed, "split-ils", pool.source)
        for _ in range(_budget(cfg, "ils", cost, 0, 200)):
            st = best.copy()
            st.kick(r_ils, int(cfg.get("ils_kick", 3)))
            st.sweep(r_ils, sweeps)
            if _q(st.J) <= _q(cap) and _q(st.K) < _q(best.K):
                best = st
        # the public set itself when it is within the cap and better on J + letters: ours never loses on both
        pub = _State(pool, baseline.mask, lam, mu, cap, rho, top)
        if _q(pub.J) <= _q(cap) and _q(pub.K) < _q(best.K):
            best = pub
    ev = pool.evaluate(best.mask)
    return Selection(best.mask.copy(), ev["share"], ev["letters"], "local_search")


# ------------------------------------------------------------------------------------------------ reporting
def _r(x: float) -> float:
    return round(float(x), _SUMMARY_DECIMALS)


def _last_letter(row: np.ndarray) -> int:
    nz = np.flatnonzero(row)
    return int(nz.max()) + 1 if nz.size else 0


def _letter_report(pool: SplitPool, mask: np.ndarray) -> dict:
    if pool.letters is None:
        return {}
    Lc = pool.letters[:, mask, :].sum(1)
    out = {}
    for t, fam in enumerate(pool.families):
        k = int(pool.num_choices[t])
        n = float(Lc[:, t].sum())
        out[fam] = {"num_choices": k,
                    "letter_counts": {LETTERS[i]: int(Lc[i, t]) for i in range(max(k, _last_letter(Lc[:, t])))},
                    "majority_share": _r(Lc[:, t].max() / n) if n else None,
                    "random": _r(1.0 / k)}
    return out


def eval_letter_report(items: pl.DataFrame, policy: dict, source: str) -> dict:
    """Per family: answer-letter counts and majority share of one source's eval items (items carry split)."""
    sub = items.filter(pl.col("source") == source)
    pool = make_pool(sub, policy, source)
    ev = set(sub.filter(pl.col("split") == "eval")["split_group_id"].to_list())
    return _letter_report(pool, np.array([g in ev for g in pool.group_ids], dtype=bool))


def _shares(pool: SplitPool, mask: np.ndarray) -> dict:
    tot = pool.counts.sum(0)
    ev = pool.counts[mask].sum(0)
    return {f: _r(ev[t] / tot[t]) if tot[t] else None for t, f in enumerate(pool.families)}


def _selection_report(pool: SplitPool, ours: Selection, public: Selection, rule: str, lam: float) -> dict:
    def obj(s: Selection) -> dict:
        return {"share": _r(s.share), "letters": _r(s.letters), "combined": _r(s.share + lam * s.letters)}
    return {"rule": rule, "method": ours.method if rule == "ours" else "public",
            "objective": {"ours": obj(ours), "public": obj(public)},
            "task_eval_share_ours": _shares(pool, ours.mask), "task_eval_share_public": _shares(pool, public.mask),
            "letter_balance_eval_ours": _letter_report(pool, ours.mask),
            "majority_share_eval_public": {f: v["majority_share"]
                                           for f, v in _letter_report(pool, public.mask).items()},
            "task_target_eval": {f: _r(pool.target[t]) for t, f in enumerate(pool.families)}}


# ------------------------------------------------------------------------------------------------ split_items
_KEY_COLUMNS = {"task_id": ("unit_task_id", "source_task_id"), "operator_id": ("operator_id",),
                "scene_id": ("scene_id",), "config_id": ("config_id",), "taxonomy": ("taxonomy",)}


def _attach_groups(items: pl.DataFrame, groups: pl.DataFrame | None) -> tuple[pl.DataFrame, int]:
    df = items
    missing = 0
    if groups is not None:
        g = groups.select([c for c in groups.columns if c in ("source", "unit_id", "split_group_id", "unit_task_id",
                                                              *UNIT_KEYS[1:])])
        g = g.rename({c: f"__g_{c}" for c in g.columns if c not in ("source", "unit_id")})
        df = df.join(g, on=["source", "unit_id"], how="left", maintain_order="left")
        missing = int(df.filter(pl.col("__g_split_group_id").is_null()).select("source", "unit_id").unique().height)
        df = df.with_columns(pl.coalesce("__g_split_group_id", "unit_id").alias("__gid"))
    elif "split_group_id" in df.columns:
        df = df.with_columns(pl.coalesce("split_group_id", *(["unit_id"] if "unit_id" in df.columns else []))
                             .cast(pl.String).alias("__gid"))
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


def _ood_levels(sub: pl.DataFrame, ood_cfg: dict, seed: int, source: str) -> tuple[dict[str, str], dict]:
    """Groups held out at L3 then L2: every group holding a unit with a held-out key value. Returns
    {group: level} and a report."""
    level_of: dict[str, str] = {}
    report: dict = {}
    n_items = sub.height
    for level in ("L3", "L2"):
        lc = ood_cfg.get(level)
        if not lc:
            continue
        key = lc.get("key")
        col = _key_column(sub, key) if key else None
        rep = {"key": key, "item_share_target": _r(float(lc.get("item_share", 0.05))),
               "families": sorted(lc.get("families") or [], key=family_sort_key)}
        if col is None:
            rep["skipped"] = f"no {key} column"
            report[level] = rep
            continue
        taken = _strs(level_of)
        vals = sorted(sub.filter(~pl.col("__gid").is_in(taken) & pl.col(col).is_not_null())[col].unique().to_list())
        order = np_rng(seed, "split-ood", source, level).permutation(len(vals)).tolist()
        goal = float(lc.get("item_share", 0.05)) * n_items
        chosen: list[str] = []
        for i in order[:max(0, len(vals) - 1)]:  # at least one value stays out of the level
            chosen.append(vals[i])
            held = sub.filter(pl.col(col).is_in(_strs(chosen)))["__gid"].unique()
            if sub.filter(pl.col("__gid").is_in(held.to_list())).height >= goal:
                break
        chosen = sorted(chosen)
        gids = sorted(set(sub.filter(pl.col(col).is_in(_strs(chosen)))["__gid"].to_list()) - set(level_of))
        for g in gids:
            level_of[g] = level
        rep.update({"held_out_values": chosen, "groups": len(gids)})
        report[level] = rep
    return level_of, report


def split_items(items: pl.DataFrame, groups: pl.DataFrame | None, policy: dict, seed: int
                ) -> tuple[pl.DataFrame, dict]:
    """Assign every item to "eval" or "sft" by whole split groups, per source.

    `items` needs source, unit_id (or split_group_id), task_id; `answer` (letter) and `num_choices` enable the letter
    term. `groups` is build_groups' table (None: the items' own split_group_id, else unit_id). Returns the items (input
    order, same columns) plus split, split_group_id (and eval_level when OOD levels are enabled), and the summary."""
    ratio = float(policy.get("eval_ratio", 0.15))
    rule = str(policy.get("rule", "ours"))
    lam = float((policy.get("objective") or {}).get("letter_weight", 1.0))
    ood = policy.get("ood") or {}
    ood_on = bool(ood.get("enabled"))
    df, missing = _attach_groups(items, groups)
    split_of: dict[tuple[str, str], str] = {}
    level_of: dict[tuple[str, str], str] = {}
    excluded_families: dict[str, set] = {}
    src_summaries: dict[str, dict] = {}
    for source in sorted(df["source"].unique().to_list()):
        sub = df.filter(pl.col("source") == source)
        sp = _source_policy(policy, source)
        s_ood = ((ood.get("sources") or {}).get(source) or {}) if ood_on else {}
        held_fams = set((s_ood.get("L3") or {}).get("families") or [])
        excluded_families[source] = held_fams
        lv, ood_report = _ood_levels(sub, s_ood, seed, source) if s_ood else ({}, {})
        rest = sub.filter(~pl.col("__gid").is_in(_strs(lv)) & ~pl.col("task_id").is_in(_strs(held_fams)))
        rest_groups = sorted(set(sub["__gid"].to_list()) - set(lv))
        pool = make_pool(rest, policy, source, group_col="__gid") if rest.height else None
        chosen: set[str] = set()
        sel_report: dict = {}
        if pool is not None and pool.n:
            pub = public_rule(pool, policy)
            ours = our_rule(pool, policy, seed, baseline=pub)
            use = ours if rule == "ours" else pub
            chosen = set(use.eval_groups(pool))
            sel_report = _selection_report(pool, ours, pub, rule, lam if pool.letters is not None else 0.0)
        # groups whose only items belong to held-out families are not in the pool: they stay SFT (items excluded)
        for g in rest_groups:
            split_of[(source, g)] = "eval" if g in chosen else "sft"
            if g in chosen:
                level_of[(source, g)] = "L1"
        for g, lev in lv.items():
            split_of[(source, g)], level_of[(source, g)] = "eval", lev
        all_groups = sorted(set(sub["__gid"].to_list()))
        eval_groups = [g for g in all_groups if split_of[(source, g)] == "eval"]
        summary = {"group_unit": sp["group_unit"] if not sp["merge_keys"]
                   else f"{sp['group_unit']} merged by {'+'.join(sp['merge_keys'])}",
                   "merge_keys": list(sp["merge_keys"]), "groups": len(all_groups),
                   "eval_groups": len(eval_groups), "sft_groups": len(all_groups) - len(eval_groups),
                   "eval_groups_target": pool.n_eval if pool is not None else 0,
                   **sel_report}
        if missing and groups is not None:
            summary["units_without_group_row"] = int(
                sub.filter(pl.col("__g_split_group_id").is_null())["unit_id"].n_unique())
        if ood_on:
            summary["ood"] = ood_report
        src_summaries[source] = summary

    sp_df = pl.DataFrame({"source": [k[0] for k in split_of], "__gid": [k[1] for k in split_of],
                          "split": list(split_of.values()),
                          "__level": [level_of.get(k) for k in split_of]},
                         schema={"source": pl.String, "__gid": pl.String, "split": pl.String, "__level": pl.String})
    df = df.drop([c for c in ("split", "eval_level") if c in df.columns])
    df = df.join(sp_df, on=["source", "__gid"], how="left", maintain_order="left")
    held = pl.lit(False)
    for source, fams in excluded_families.items():
        if fams:
            held = held | ((pl.col("source") == source) & pl.col("task_id").is_in(sorted(fams)))
    df = df.with_columns(held.alias("__held"))
    if ood_on:
        df = df.with_columns(pl.when(pl.col("split") == "eval")
                             .then(pl.when(pl.col("__held")).then(pl.lit("L3")).otherwise(pl.col("__level")))
                             .otherwise(pl.lit(None, pl.String)).alias("eval_level"))
    excluded = df.filter(pl.col("__held") & (pl.col("split") == "sft"))
    df = df.filter(~(pl.col("__held") & (pl.col("split") == "sft")))

    # counts per source from the final rows
    for source, summary in src_summaries.items():
        s = df.filter(pl.col("source") == source)
        tc = lambda f: {r[0]: int(r[1]) for r in f.group_by("task_id").agg(pl.len()).iter_rows()}  # noqa: E731
        total_c, eval_c, sft_c = tc(s), tc(s.filter(pl.col("split") == "eval")), tc(s.filter(pl.col("split") == "sft"))
        summary.update({"total": s.height, "eval": sum(eval_c.values()), "sft": sum(sft_c.values()),
                        "task_counts_total": total_c, "task_counts_eval": eval_c, "task_counts_sft": sft_c,
                        "task_eval_share": {f: _r(eval_c.get(f, 0) / n) for f, n in total_c.items()}})
        if ood_on:
            ex = excluded.filter(pl.col("source") == source)
            summary["ood"]["excluded_sft_items"] = tc(ex) if ex.height else {}
            ev = s.filter(pl.col("split") == "eval")
            summary["ood"]["levels"] = {
                lev: {"items": ev.filter(pl.col("eval_level") == lev).height,  # held-out families' items count in L3
                      "groups": sum(1 for (src, _), v in level_of.items() if src == source and v == lev),
                      "task_counts": tc(ev.filter(pl.col("eval_level") == lev))}
                for lev in ("L1", "L2", "L3")}

    out_cols = [c for c in items.columns if c not in ("split", "split_group_id", "eval_level")]
    df = df.with_columns(pl.col("__gid").alias("split_group_id"))
    df = df.select(*out_cols, "split", "split_group_id", *(["eval_level"] if ood_on else []))
    eval_n = int((df["split"] == "eval").sum())
    summary = {"seed": int(seed), "eval_ratio": ratio, "split_policy": policy.get("split_policy", ""),
               "rule": rule, "eval_items": eval_n, "sft_items": df.height - eval_n, "total_items": df.height,
               "excluded_items": excluded.height, "sources": src_summaries}
    return df, json.loads(json.dumps(summary, sort_keys=True))


# ------------------------------------------------------------------------------------------------ checks and lists
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


# ------------------------------------------------------------------------------------------------ pool files
def _row_sort_key(row: dict) -> tuple:
    ident = next((str(row[k]) for k in ("item_key", "item_id", "candidate_key") if row.get(k) is not None), "")
    return (str(row["source"]), str(row["split_group_id"]), ident, compact_json(row))


def split_pool_file(items_jsonl: Path, out_dir: Path, config_file: Path | None = None) -> dict:
    """Split any item pool: rows need source, task_id, split_group_id (everything else passes through; `answer` letters
    enable the letter term). Writes out_dir/eval.jsonl, sft.jsonl (rows + split, sorted, canonical compact JSON) and
    split_summary.json; returns the summary."""
    policy, seed = load_policy(config_file)
    rows: list[dict] = []
    with open(items_jsonl, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            lack = [k for k in ("source", "task_id", "split_group_id") if row.get(k) in (None, "")]
            if lack:
                raise ValueError(f"{Path(items_jsonl).name} line {n}: missing {', '.join(lack)}")
            rows.append(row)
    cols: dict[str, list] = {
        "source": [str(r["source"]) for r in rows], "task_id": [str(r["task_id"]) for r in rows],
        "split_group_id": [str(r["split_group_id"]) for r in rows],
        "unit_id": [str(r.get("unit_id") or r.get("source_unit_id") or r["split_group_id"]) for r in rows],
        "answer": [r.get("answer") if isinstance(r.get("answer"), str) and r.get("answer") in LETTERS else None
                   for r in rows],
        "num_choices": [int(r["num_choices"]) if isinstance(r.get("num_choices"), int) else None for r in rows]}
    for k in ("source_task_id", *UNIT_KEYS[1:]):
        if any(r.get(k) is not None for r in rows):
            cols[k] = [None if r.get(k) is None else str(r[k]) for r in rows]
    frame = pl.DataFrame(cols, schema={k: (pl.Int64 if k == "num_choices" else pl.String) for k in cols})
    frame = frame.with_row_index("__line")
    out, summary = split_items(frame, None, policy, seed)
    by_split: dict[str, list[dict]] = {"eval": [], "sft": []}
    has_level = "eval_level" in out.columns
    for rec in out.select("__line", "split", *(["eval_level"] if has_level else [])).iter_rows(named=True):
        row = dict(rows[rec["__line"]])
        row["split"] = rec["split"]
        if has_level:
            row["eval_level"] = rec["eval_level"]
        by_split[rec["split"]].append(row)
    out_dir = Path(out_dir)
    for name, part in by_split.items():
        part.sort(key=_row_sort_key)
        atomic_write_text(out_dir / f"{name}.jsonl", "".join(compact_json(r) + "\n" for r in part))
    write_json(out_dir / "split_summary.json", summary)
    return summary
