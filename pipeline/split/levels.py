"""The held-out values of one out-of-distribution eval level (L2 / L3), chosen so that the level's answer labels are
as balanced as its pool allows.

A level holds out whole key values (RH20T scenes or tasks, GM-100 / AIST tasks): every group holding a unit with a
held-out value is eval at that level. The level must hold at least `item_share` of the source's items (the goal), and
at least one value stays out of it. The values shape the level's labels: a scene where most takes fail makes T7
"failure" the majority label of L2, a task recorded standing still makes T6 "stationary" the majority. So among the
value sets that reach the goal, the search takes the one with the least label term

    B(S) = Σ_t (k_t · majority_share_t(S) − 1)  [k_t − 1 for a family of the pool the level does not hold]
           + size_weight · max(0, n(S) − goal) / goal

(k_t = the family's answer labels in the pool, its letters when the pool has no answer texts), the same label term
as L1's selection (objective.letter_obj). The search is a best-move local search (add, drop or swap one value) from the seeded draw the levels used before (values in a
seeded order until the goal) and from `restarts` seeded random draws; a level holds at most max((1 + max_over_goal) ·
goal, (1 + max_over_draw) · the seeded draw's items), so the levels take little more from L1 and SFT than the seeded
draw did, or twice their goal (a coarse pool, one held-out value already over the goal, keeps about its size); ties
keep the earliest start. Without answers (or with `ood.balance.enabled: false`) the
seeded draw is the level.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.core.seeding import rng as np_rng
from pipeline.settings.models import OodBalance
from .objective import make_pool

_Q = 10  # decimals objective comparisons are quantised to


class LevelProblem:
    """One level's choice: per value the groups it holds; per group its items, family and answer-label counts. A set
    of values holds the union of their groups (values whose groups are disjoint, the usual case, simply add up)."""

    def __init__(
        self, free: pl.DataFrame, col: str, vals: list[str], policy: dict, source: str, size_weight: float = 1.0
    ):
        self.vals = vals
        self.size_weight = size_weight
        pool = make_pool(free, policy, source, group_col="__gid")
        gi = {g: i for i, g in enumerate(pool.group_ids)}
        vi = {v: i for i, v in enumerate(vals)}
        self.incidence = np.zeros((len(vals), pool.n))
        for g, v in free.filter(pl.col(col).is_not_null()).select("__gid", col).unique().iter_rows():
            self.incidence[vi[str(v)], gi[g]] = 1.0
        self.disjoint = bool((self.incidence.sum(0) <= 1).all())
        self.g_sizes = pool.counts.sum(1)
        self.g_letters = None if pool.letters is None else pool.letters.transpose(1, 0, 2).reshape(pool.n, -1)
        self.shape = None if pool.letters is None else pool.letters.shape[::2]  # (K, T)
        if self.disjoint:  # per value sums: a set's counts are sums over its values
            self.v_sizes = self.incidence @ self.g_sizes
            self.v_letters = None if self.g_letters is None else self.incidence @ self.g_letters
        self.k = np.asarray(pool.num_choices, dtype=float)
        self.present = pool.counts.sum(0) > 0

    def _held(self, masks: np.ndarray) -> np.ndarray:
        return ((masks.astype(float) @ self.incidence) > 0).astype(float)

    def items(self, masks: np.ndarray) -> np.ndarray:
        masks = np.atleast_2d(masks)
        return masks.astype(float) @ self.v_sizes if self.disjoint else self._held(masks) @ self.g_sizes

    def labels_term(self, masks: np.ndarray) -> np.ndarray:
        """B(S) without the size term, for a batch of value masks (M, V)."""
        masks = np.atleast_2d(masks)
        if self.g_letters is None:
            return np.zeros(len(masks))
        flat = masks.astype(float) @ self.v_letters if self.disjoint else self._held(masks) @ self.g_letters
        Lc = flat.reshape(len(masks), *self.shape)  # (M, K, T)
        n = Lc.sum(1)  # (M, T)
        share = np.where(n > 0, Lc.max(1) / np.maximum(n, 1.0), 1.0)  # a family the level lacks: as one label
        return ((self.k * share - 1.0) * self.present).sum(-1)

    def objective(self, masks: np.ndarray, goal: float) -> np.ndarray:
        over = np.maximum(0.0, self.items(masks) - goal) / max(goal, 1.0)
        return np.round(self.labels_term(masks) + self.size_weight * over, _Q)

    def draw(self, order: list[int], goal: float, max_values: int) -> np.ndarray:
        """Values in `order` until the level holds the goal (never more than max_values values)."""
        mask = np.zeros(len(self.vals), dtype=bool)
        for i in order[:max_values]:
            mask[i] = True
            if self.items(mask)[0] >= goal:
                break
        return mask


def _moves(mask: np.ndarray) -> np.ndarray:
    """Every mask one add, drop or swap away (M, B), in a fixed order."""
    ins, outs = np.flatnonzero(mask), np.flatnonzero(~mask)
    out = []
    for j in outs:
        m = mask.copy()
        m[j] = True
        out.append(m)
    for i in ins:
        m = mask.copy()
        m[i] = False
        out.append(m)
        for j in outs:
            s = m.copy()
            s[j] = True
            out.append(s)
    return np.array(out, dtype=bool).reshape(-1, len(mask))


def _search(
    prob: LevelProblem, start: np.ndarray, goal: float, cap: float, max_values: int, sweeps: int
) -> tuple[np.ndarray, float]:
    cur = start.copy()
    cur_f = float(prob.objective(cur[None], goal)[0])
    for _ in range(sweeps):
        cand = _moves(cur)
        if not len(cand):
            break
        items = prob.items(cand)
        ok = (items >= goal) & (items <= cap) & (cand.sum(1) <= max_values)
        if not ok.any():
            break
        f = np.where(ok, prob.objective(cand, goal), np.inf)
        b = int(np.argmin(f))
        if not f[b] < cur_f:
            break
        cur, cur_f = cand[b], float(f[b])
    return cur, cur_f


def choose_values(
    free: pl.DataFrame, col: str, vals: list[str], goal: float, policy: dict, seed: int, source: str, level: str
) -> tuple[list[str], dict]:
    """The held-out values of one level and a report: the seeded draw's and the chosen set's label term B and items."""
    bal = policy["ood"].get("balance") or OodBalance().model_dump()  # a hand-made policy: the defaults
    order = np_rng(seed, "split-ood", source, level).permutation(len(vals)).tolist()
    max_values = max(0, len(vals) - 1)  # at least one value stays out of the level
    prob = LevelProblem(free, col, vals, policy, source, float(bal["size_weight"]))
    drawn = prob.draw(order, goal, max_values)
    best, method = drawn, "seeded draw"
    drawn_items = float(prob.items(drawn)[0])
    if bal["enabled"] and prob.g_letters is not None and drawn_items >= goal:
        cap = max((1.0 + float(bal["max_over_goal"])) * goal, (1.0 + float(bal["max_over_draw"])) * drawn_items)
        starts = [drawn] + [
            prob.draw(
                np_rng(seed, "split-ood-start", source, level, r).permutation(len(vals)).tolist(), goal, max_values
            )
            for r in range(int(bal["restarts"]))
        ]
        best_f = np.inf
        for s in starts:
            if not goal <= float(prob.items(s)[0]) <= cap:  # a random start may hold one value larger than the cap
                continue
            m, f = _search(prob, s, goal, cap, max_values, int(bal["max_sweeps"]))
            if f < best_f:
                best, best_f = m, f
        method = "label balance"
    chosen = sorted(vals[i] for i in np.flatnonzero(best))
    labels = prob.labels_term(np.array([drawn, best]))
    report = {
        "method": method,
        "label_term": round(float(labels[1]), 6),
        "label_term_seeded_draw": round(float(labels[0]), 6),
        "items_seeded_draw": int(drawn_items),
    }
    return chosen, report
