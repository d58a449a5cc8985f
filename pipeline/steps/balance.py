"""Thinning a source's step items so that no text feature a blind predictor reads tells a wrong step: after natural
and injected errors are placed, items are dropped one at a time (the one whose removal most lowers the statistic)
until no feature value's wrong share departs from its family's more than chance allows (a chi-square test per
value), or a floor of kept items is reached (configs/tasks/T13.yaml `balance`; docs/steps.md "Placement").

    keep = balance(drafts, spec)   # the drafts kept, in their order; spec: max_chi2, min_support, keep_at_least

Features of a scored step (what the blind gates of pipeline/steps/gates.py read, named here without the wording):
its kind and claim, each template field's value (REASSEMBLE's primitive and action), its position, its distance
from the end and the item's step count. Per feature value with at least `min_support` scored steps: Pearson's
chi-square (one degree of freedom) of its wrong steps against the share of its family (all values of one feature;
every scored step has one value per family, fields aside), 6.63 being the 1 % point under independence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.settings.steps import StepBalance


def step_features(st: dict, position: int, num_steps: int) -> list[str]:
    out = [
        f"kind={st['kind']}:{st.get('claim')}",
        f"pos={position}",
        f"end={num_steps - 1 - position}",
        f"n={num_steps}",
    ]
    return out + [f"{k}={v}" for k, v in sorted(st["fields"].items())]


def _family(feature: str) -> str:
    return feature.split("=", 1)[0]


def _matrices(drafts: list[dict]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per item and feature value: scored steps (T) and wrong steps (W)."""
    names: dict[str, int] = {}
    cells = []
    for d in drafts:
        c: dict[int, list[int]] = {}
        n = len(d["steps"])
        for i, st in enumerate(d["steps"]):
            if st["label"] not in (1, -1):
                continue
            for f in step_features(st, i, n):
                j = names.setdefault(f, len(names))
                c.setdefault(j, [0, 0])
                c[j][0] += 1
                c[j][1] += st["label"] == -1
        cells.append(c)
    t = np.zeros((len(drafts), len(names)))
    w = np.zeros((len(drafts), len(names)))
    for i, c in enumerate(cells):
        for j, (tot, wrong) in c.items():
            t[i, j], w[i, j] = tot, wrong
    return t, w, list(names)


def chi2(t: np.ndarray, w: np.ndarray, families: np.ndarray, min_support: int) -> np.ndarray:
    """Per row of (t, w) (feature totals, one row per candidate item set) and feature value: Pearson's chi-square
    (one degree of freedom) of the value's wrong steps against its family's wrong share; 0 for values with fewer than
    `min_support` scored steps."""
    t, w = np.atleast_2d(t), np.atleast_2d(w)
    fam_total = np.zeros_like(t)
    fam_wrong = np.zeros_like(w)
    for f in np.unique(families):
        m = families == f
        fam_total[:, m] = t[:, m].sum(axis=1, keepdims=True)
        fam_wrong[:, m] = w[:, m].sum(axis=1, keepdims=True)
    rate = np.divide(fam_wrong, fam_total, out=np.zeros_like(t), where=fam_total > 0)
    var = t * rate * (1 - rate)
    ok = (t >= min_support) & (var > 0)
    return np.where(ok, (w - t * rate) ** 2 / np.where(ok, var, 1), 0.0)


def balance(drafts: list[dict], spec: StepBalance | None) -> list[dict]:
    """The drafts kept (in their order): while some feature value's chi-square exceeds `max_chi2` and more than
    `keep_at_least` of the items remain, drop the item whose removal leaves the smallest sum of chi-squares. None:
    every draft is kept."""
    if spec is None or len(drafts) < 2:
        return list(drafts)
    t, w, names = _matrices(drafts)
    families = np.array([_family(n) for n in names])
    keep = np.ones(len(drafts), dtype=bool)
    floor = int(np.ceil(float(spec.keep_at_least) * len(drafts)))
    tot, wrong = t.sum(axis=0), w.sum(axis=0)
    support, limit = int(spec.min_support), float(spec.max_chi2)
    while keep.sum() > max(floor, 1) and chi2(tot, wrong, families, support).max() > limit:
        idx = np.flatnonzero(keep)
        after = chi2(tot - t[idx], wrong - w[idx], families, support).sum(axis=1)
        drop = idx[int(np.argmin(after))]  # ties: the earliest item
        keep[drop] = False
        tot, wrong = tot - t[drop], wrong - w[drop]
    return [d for d, k in zip(drafts, keep) if k]
