"""The public rule: a re-implementation of the public script's greedy + swaps + restarts selection."""

from __future__ import annotations

import math
import random

import numpy as np

from .objective import _EPS, Selection, SplitPool


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
    work, C2, t2 = pool.share_work(Co.shape), np.empty_like(Co), np.empty_like(So)
    for _ in range(pool.n_eval):
        # C + Co and tot + So on flat arrays (exact: integer counts), J into preallocated arrays (the same bits)
        np.add(Co.reshape(-1), np.tile(C, pool.n), out=C2.reshape(-1))
        sc = pool.share_obj(C2, np.add(So, tot, out=t2), work, may_be_zero=C <= 0)
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
        outs = sel[np.lexsort((sel, delta[sel]))][: max(1, min(len(sel), limit))]  # ascending (delta, id)
        ins = uns[np.lexsort((-uns, -delta[uns]))][: max(1, min(len(uns), limit))]  # descending (delta, id)
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
    cfg = policy["public_rule"]
    seed, restarts = int(cfg["seed"]), int(cfg["restarts"])
    passes, limit = int(cfg["swap_passes"]), int(cfg["swap_candidates"])
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
