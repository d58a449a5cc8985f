"""One source's selection problem (SplitPool) and the objective both rules minimise (J, and the letter term L)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from pipeline.release.schema import CHOICE_LETTERS
from .policy import family_sort_key, n_eval_groups, source_policy

_EPS = 1e-12
_Q = 10  # decimals objective comparisons are quantised to in our rule


@dataclass
class SplitPool:
    """One source's selection problem: per-group family counts (and answer-letter counts), targets and weights."""

    source: str
    group_ids: list[str]  # sorted
    families: list[str]  # T1.. in natural order
    counts: np.ndarray  # (n, T) items per group and family
    letters: np.ndarray | None  # (K, n, T) answers per group and family: letters A-F (K = 6), or the
    # answer labels of `values` (objective.balance_on); None: no answers
    num_choices: np.ndarray  # (T,) choices per family (letter term: k·majority share − 1)
    weights: np.ndarray  # (T,)
    eval_ratio: float
    zero_penalty: float = 2.5
    items_weight: float = 0.35
    n_eval: int = 0
    values: list[list[str]] | None = None  # per family, the answer labels indexing `letters` (None: letters A-F)
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
        # every sum of zero penalties is exact (multiples of 2^-24 below 2^28): the matmul's sum over the families at
        # 0 equals adding them one by one, in any order (share_obj may_be_zero)
        z = self._zero * 2.0**24
        self._zero_sums_exact = bool((self._zero >= 0).all() and (z == np.floor(z)).all() and self._zero.sum() < 2**28)
        self._pts = np.where(tot > 0, 100.0 / np.maximum(tot, 1.0), 0.0)
        if self.letters is not None:
            self.letters = np.asarray(self.letters, dtype=np.float64)
        K = self.letters.shape[0] if self.letters is not None else len(CHOICE_LETTERS)
        self._letter_mask = (np.arange(K)[:, None] < np.asarray(self.num_choices)[None, :]).astype(float)
        if not self.n_eval:
            self.n_eval = n_eval_groups(len(self.group_ids), self.eval_ratio)

    @property
    def n(self) -> int:
        return len(self.group_ids)

    # J for a batch of eval count vectors C (..., T) with item totals tot (...); `work` (share_work(C.shape)): the
    # same operations in the same order into preallocated arrays (J is work's own array then, overwritten next call).
    # A matmul's bits for a row depend on the row's place in the batch (the BLAS kernels' blocking): callers keep
    # their batches' shapes and row order. `may_be_zero` (T,) (with work, C (B, T)): the families whose counts can be
    # 0 in C; the zero penalties of the others are left out (see _zero_sums_exact)
    def share_obj(
        self, C: np.ndarray, tot, work: dict | None = None, may_be_zero: np.ndarray | None = None
    ) -> np.ndarray:
        if work is None:
            dev = np.abs(C - self.target) @ self._scale + (C <= 0) @ self._zero
            return dev + self.items_weight * np.abs(tot - self.target_total) / max(self.target_total, 1.0)
        d = work["d"]
        flat = d.reshape(-1)  # C − target elementwise on flat arrays: a broadcast over short rows is slow
        np.abs(np.subtract(np.ascontiguousarray(C).reshape(-1), work["target"], out=flat), out=flat)
        J = np.matmul(d, self._scale, out=work["J"])
        if may_be_zero is None or not self._zero_sums_exact:
            J += np.matmul(np.less_equal(C, 0, out=work["z"]), self._zero, out=work["b"])
        else:  # the same sum b, then J + b as above
            b = work["b"]
            b.fill(0.0)
            for t in np.flatnonzero(may_be_zero & (self._zero > 0)).tolist():
                b += np.where(C[:, t] <= 0, self._zero[t], 0.0)
            J += b
        t = np.abs(np.subtract(tot, self.target_total, out=work["t"]), out=work["t"])
        np.multiply(self.items_weight, t, out=t)
        t /= max(self.target_total, 1.0)
        J += t
        return J

    def share_work(self, shape: tuple[int, ...]) -> dict:
        rows = int(np.prod(shape[:-1]))
        return {
            "d": np.empty(shape),
            "z": np.empty(shape, dtype=bool),
            "J": np.empty(shape[:-1]),
            "b": np.empty(shape[:-1]),
            "t": np.empty(shape[:-1]),
            "target": np.tile(self.target, rows),
        }

    # L for eval answer counts Lc (K, T) or a batch (K, B, T): answers on the first axis (fast reductions). Families
    # count alike here: task_weights weigh the shares (J); an answer imbalance is a leak whatever the family's weight
    def letter_obj(self, Lc: np.ndarray) -> np.ndarray:
        return self.letter_terms(Lc, l1=False)[0]

    # the answers' L1 distance from uniform, Σ_t k_t·Σ_l |c_tl − n_t/k_t| / (2·n_t): the search's smooth companion
    def letter_l1(self, Lc: np.ndarray) -> np.ndarray:
        return self.letter_terms(Lc)[1]

    # (L, L1) of Lc, sharing their answer totals (L1 None when not asked for)
    def letter_terms(self, Lc: np.ndarray, l1: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        n = Lc.sum(0)
        k = self.num_choices
        counted, n1 = n > 0, np.maximum(n, 1.0)
        L = np.where(counted, k * Lc.max(0) / n1 - 1.0, 0.0).sum(-1)
        if not l1:
            return L, None
        mask = self._letter_mask if Lc.ndim == 2 else self._letter_mask[:, None, :]
        dev = np.abs(Lc - (n / k)[None]) * mask
        return L, np.where(counted, dev.sum(0) * k / (2.0 * n1), 0.0).sum(-1)

    # the worst family's eval share deviation |n_t/N_t − r| in percentage points, for a batch C (..., T) → (...);
    # `absdev` = |C − target| when the caller has it already
    def worst_dev_pts(self, C: np.ndarray, absdev: np.ndarray | None = None) -> np.ndarray:
        if not self.families:
            return np.zeros(np.shape(C)[:-1])
        absdev = np.abs(C - self.target) if absdev is None else absdev
        return (absdev * self._pts).max(-1)

    def evaluate(self, mask: np.ndarray) -> dict:
        mask = np.asarray(mask, dtype=bool)
        C = self.counts[mask].sum(0)
        J = float(self.share_obj(C, C.sum()))
        L = float(self.letter_obj(self.letters[:, mask, :].sum(1))) if self.letters is not None else 0.0
        return {"share": J, "letters": L}


@dataclass
class Selection:
    mask: np.ndarray  # (n,) bool, True = eval
    share: float  # J
    letters: float  # L (0 without answers)
    method: str
    best_worst_dev_pts: float | None = None  # exact search: the least worst-family deviation any eval set reaches
    dominance_relaxed: bool = False  # exact search: families_not_worse_than_public set aside for the bound

    def eval_groups(self, pool: SplitPool) -> list[str]:
        return [g for g, m in zip(pool.group_ids, self.mask) if m]


def make_pool(
    items: pl.DataFrame,
    policy: dict,
    source: str | None = None,
    group_col: str = "split_group_id",
    families: list[str] | None = None,
    balance_on: str | None = None,
) -> SplitPool:
    """The selection problem of one source's items (columns task_id, `group_col`, optional answer, num_choices)."""
    source = source or (items["source"][0] if "source" in items.columns and items.height else "")
    sp = source_policy(policy, source)
    obj = policy["objective"]
    gids = sorted(set(items[group_col].to_list()))
    fams = families or sorted(set(items["task_id"].to_list()), key=family_sort_key)
    gi = {g: i for i, g in enumerate(gids)}
    fi = {f: i for i, f in enumerate(fams)}
    counts = np.zeros((len(gids), len(fams)))
    g_idx = np.array([gi[g] for g in items[group_col].to_list()], dtype=np.int64)
    f_idx = np.array([fi[f] for f in items["task_id"].to_list()], dtype=np.int64)
    np.add.at(counts, (g_idx, f_idx), 1.0)
    letters, values = None, None
    k = np.zeros(len(fams))
    balance = balance_on or policy["objective"]["balance_on"]
    if balance == "answer_text" and "answer_text" in items.columns and items["answer_text"].drop_nulls().len():
        # the answers' labels: a family's eval labels as even as the pool allows, so neither the option set nor a
        # label prior answers eval items (letters need no care here: they are dealt per release file afterwards)
        texts = items["answer_text"].to_list()
        values = [sorted({x for x, f in zip(texts, f_idx) if f == t and x is not None}) for t in range(len(fams))]
        pos = [{v: i for i, v in enumerate(vs)} for vs in values]
        l_idx = np.array([pos[f].get(x, -1) if x is not None else -1 for x, f in zip(texts, f_idx)], dtype=np.int64)
        ok = l_idx >= 0
        letters = np.zeros((max(1, max(len(vs) for vs in values)), len(gids), len(fams)))
        np.add.at(letters, (l_idx[ok], g_idx[ok], f_idx[ok]), 1.0)
        k = np.array([float(len(vs)) for vs in values])
    elif "answer" in items.columns and items["answer"].drop_nulls().len():
        ans = items["answer"].to_list()
        l_idx = np.array(
            [CHOICE_LETTERS.find(a) if isinstance(a, str) and len(a) == 1 else -1 for a in ans], dtype=np.int64
        )
        ok = l_idx >= 0
        letters = np.zeros((len(CHOICE_LETTERS), len(gids), len(fams)))
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
    weights = np.array([float(sp["task_weights"].get(f, 1.0)) for f in fams])
    return SplitPool(
        source=source,
        group_ids=gids,
        families=fams,
        counts=counts,
        letters=letters,
        values=values,
        num_choices=np.maximum(k, 1.0),
        weights=weights,
        eval_ratio=float(policy["eval_ratio"]),
        zero_penalty=float(obj["zero_penalty"]),
        items_weight=float(obj["items_weight"]),
    )
