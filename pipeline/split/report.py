"""The per-source selection report written into split_summary.json."""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.release.schema import CHOICE_LETTERS
from .objective import Selection, SplitPool, make_pool

_SUMMARY_DECIMALS = 6


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
        names = pool.values[t] if pool.values is not None else CHOICE_LETTERS
        out[fam] = {
            "num_choices": k,
            ("letter_counts" if pool.values is None else "answer_counts"): {
                names[i]: int(Lc[i, t]) for i in range(max(k, _last_letter(Lc[:, t])))
            },
            "majority_share": _r(Lc[:, t].max() / n) if n else None,
            "random": _r(1.0 / k),
        }
    return out


def eval_letter_report(items: pl.DataFrame, policy: dict, source: str) -> dict:
    """Per family: answer-letter counts and majority share of one source's eval items (items carry split)."""
    sub = items.filter(pl.col("source") == source)
    pool = make_pool(sub, policy, source, balance_on="answer")  # the letters the release files hold
    ev = set(sub.filter(pl.col("split") == "eval")["split_group_id"].to_list())
    return _letter_report(pool, np.array([g in ev for g in pool.group_ids], dtype=bool))


def _shares(pool: SplitPool, mask: np.ndarray) -> dict:
    tot = pool.counts.sum(0)
    ev = pool.counts[mask].sum(0)
    return {f: _r(ev[t] / tot[t]) if tot[t] else None for t, f in enumerate(pool.families)}


def _deviation_report(pool: SplitPool, ours: Selection, public: Selection, rule: str, bound: float | None) -> dict:
    """The worst family's |eval share − eval_ratio| in points: the bound, each rule's value, whether the rule in use
    meets it, and (exact search only; null after local search) the least value any eval set of the pool reaches."""

    def worst(s: Selection) -> float:
        return _r(pool.worst_dev_pts(pool.counts[s.mask].sum(0)))

    used = worst(ours if rule == "ours" else public)
    return {
        "bound": None if bound is None else _r(bound),
        "ours": worst(ours),
        "public": worst(public),
        "best_achievable": None if ours.best_worst_dev_pts is None else _r(ours.best_worst_dev_pts),
        "bound_met": None if bound is None else bool(used <= _r(bound)),
        "families_not_worse_than_public_relaxed": bool(ours.dominance_relaxed),
    }


def _selection_report(
    pool: SplitPool, ours: Selection, public: Selection, rule: str, lam: float, bound: float | None = None
) -> dict:
    def obj(s: Selection) -> dict:
        return {"share": _r(s.share), "letters": _r(s.letters), "combined": _r(s.share + lam * s.letters)}

    return {
        "rule": rule,
        "method": ours.method if rule == "ours" else "public",
        "family_deviation_pts": _deviation_report(pool, ours, public, rule, bound),
        "objective": {"ours": obj(ours), "public": obj(public)},
        "task_eval_share_ours": _shares(pool, ours.mask),
        "task_eval_share_public": _shares(pool, public.mask),
        "answer_balance_eval_ours": _letter_report(pool, ours.mask),
        "majority_share_eval_public": {f: v["majority_share"] for f, v in _letter_report(pool, public.mask).items()},
        "task_target_eval": {f: _r(pool.target[t]) for t, f in enumerate(pool.families)},
    }
