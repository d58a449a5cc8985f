"""Our rule: the worst-family bound (exact search), J(ours) ≤ J(public) on the same pool, then balanced answer
letters (see the package docstring). The search's shortcuts keep every compared value's bits: docs/engineering.md,
"The split search: faster without changing a result"."""

from __future__ import annotations

import itertools
import math

import numpy as np

from pipeline.core.seeding import rng as np_rng
from .objective import _Q, Selection, SplitPool
from .public import public_rule


_ROWS = 64  # candidate rows per step of the sweep's count additions


def _q(x):
    return np.round(x, _Q)


def _first_k(a: np.ndarray, k: int) -> np.ndarray:
    """np.argsort(a, kind="stable")[:k] (the k least, ties by first index) without sorting all of `a`: the indices
    whose value is ≤ any bound ≥ the k-th least hold the k first of that order, and a stable sort of those (in
    ascending index order) keeps their order. NaN sorts last in both; a NaN bound falls back on the full sort."""
    if k >= a.size:
        return np.argsort(a, kind="stable")[:k]
    sub = a[::4] if a.size >= 16 * k else a  # the k-th least of a subset is ≥ the k-th least of `a`: fewer to sort
    kth = np.partition(sub, k - 1)[k - 1]
    cand = np.flatnonzero(a <= kth)
    if cand.size < k:
        return np.argsort(a, kind="stable")[:k]
    return cand[np.argsort(a[cand], kind="stable")[:k]]


class _State:
    """An eval set with running family/letter counts and its search objective
    K = J + lam·(L + mu·L1) + rho·max(0, J − cap)   (L1: the letters' L1 distance from uniform, a smooth companion
    of the majority-share term L that guides the search off its plateaus)."""

    def __init__(
        self,
        pool: SplitPool,
        mask: np.ndarray,
        lam: float = 0.0,
        mu: float = 0.0,
        cap: float = math.inf,
        rho: float = 0.0,
        top: int = 64,
    ):
        self.pool, self.lam, self.mu, self.cap, self.rho, self.top = pool, lam, mu, cap, rho, max(1, int(top))
        self.use_letters = lam > 0 and pool.letters is not None
        self.mask = np.asarray(mask, dtype=bool).copy()
        self.C = pool.counts[self.mask].sum(0)
        self.tot = float(self.C.sum())
        self.Lc = pool.letters[:, self.mask, :].sum(1) if self.use_letters else None
        self.J = float(pool.share_obj(self.C, self.tot))
        self.K = float(self.objective(np.asarray(self.J), self.Lc))
        self._uns = None  # the non-eval groups with their counts rows and sizes (_candidates), until a swap

    def objective(self, J: np.ndarray, Lc: np.ndarray | None) -> np.ndarray:
        K = J + self.rho * np.maximum(0.0, J - self.cap) if self.rho else J
        if self.use_letters:
            L, L1 = self.pool.letter_terms(Lc, l1=bool(self.mu))
            K = K + self.lam * L
            if self.mu:
                K = K + self.lam * self.mu * L1
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
        self._uns = None

    def _candidates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The non-eval groups (ascending), their counts rows (contiguous, zero rows up to a multiple of _ROWS) and
        sizes: rebuilt after a swap only."""
        if self._uns is None:
            uns = np.flatnonzero(~self.mask)
            c_uns = np.zeros((-(-uns.size // _ROWS) * _ROWS, self.pool.counts.shape[1]))  # padded: see _wins
            c_uns[: uns.size] = self.pool.counts[uns]
            self._uns = (uns, c_uns, self.pool.sizes[uns])
        return self._uns

    def _wins(self, batch: list[int], buf: dict) -> list[int]:
        """For each eval group of `batch`, searched from the current set: its improving replacement (the best
        non-eval group, the first among equals), or -1. The letter objective of a batch is one call over all its
        candidates (elementwise, and reduced per candidate: the same values as one call per group)."""
        p = self.pool
        uns, c_uns, s_uns = self._candidates()
        q_now = _q(self.K)
        Js, ins = [], []
        width = _ROWS * c_uns.shape[1]
        C2 = buf["C2"][: uns.size]
        for o in batch:
            # integer-valued float64 counts: these sums are exact, whatever the order of the additions; _ROWS rows at
            # a time (a broadcast over short rows is slow). A family can be at 0 only where the base is.
            base = self.C - p.counts[o]
            buf["base"][:] = base  # _ROWS copies of it
            np.add(c_uns.reshape(-1, width), buf["base"].reshape(-1), out=buf["C2"].reshape(-1, width))
            np.add(s_uns, self.tot - p.sizes[o], out=buf["t2"])
            J2 = p.share_obj(C2, buf["t2"], buf["share"], may_be_zero=base <= 0)
            if not self.use_letters:  # _q is monotone: the least quantised J is _q(min J); its index only on a win
                return [int(uns[int(np.argmin(_q(J2)))]) if _q(J2.min()) < q_now else -1]
            keep = _first_k(_q(J2), self.top) if uns.size > self.top else slice(None)  # letters for the top by J
            Js.append(J2[keep].copy())
            ins.append(uns[keep])
        nb, per = len(batch), ins[0].size
        cand = np.concatenate(ins)
        n_ans, n_fam = self.Lc.shape
        Lc2 = (
            (self.Lc[:, None, :] - p.letters[:, batch, :])[:, :, None, :]
            + p.letters[:, cand, :].reshape(n_ans, nb, per, n_fam)
        ).reshape(n_ans, nb * per, n_fam)
        K2 = _q(self.objective(np.concatenate(Js), Lc2)).reshape(nb, per)
        j = np.argmin(K2, axis=1)
        return [int(cand[b * per + j[b]]) if K2[b, j[b]] < q_now else -1 for b in range(nb)]

    def sweep(self, rng: np.random.Generator, max_sweeps: int) -> None:
        """First improvement over the eval groups (seeded order), each replaced by the best non-eval group.

        An eval group found without an improving replacement is not searched again until the next swap: the search
        from it depends on the eval set alone, so it would find none again (the same result, less work). With
        letters, the next groups are searched together from the same set (up to 8 while none wins, one after a win);
        the ones after a winner are searched again from the new set, as one at a time would."""
        settled: set[int] = set()
        buf = None
        most = 8 if self.use_letters else 1
        for _ in range(max(0, max_sweeps)):
            improved = False
            outs = np.flatnonzero(self.mask)
            rng.shuffle(outs)
            todo = outs.tolist()
            at, size = 0, 1
            while at < len(todo):
                uns, c_uns, s_uns = self._candidates()
                if not uns.size:
                    return
                batch = []  # (position, group)
                while at < len(todo) and len(batch) < size:
                    if todo[at] not in settled:
                        batch.append((at, todo[at]))
                    at += 1
                if not batch:
                    break
                if buf is None:  # the candidate count never changes (one group out, one in)
                    buf = {
                        "C2": np.empty_like(c_uns),
                        "t2": np.empty_like(s_uns),
                        "base": np.empty((_ROWS, c_uns.shape[1])),
                        "share": self.pool.share_work((uns.size, c_uns.shape[1])),
                    }
                for (pos, o), i in zip(batch, self._wins([o for _, o in batch], buf)):
                    if i < 0:
                        settled.add(o)
                        continue
                    self.swap(o, i)
                    settled.clear()
                    improved = True
                    at, size = pos + 1, 1
                    break
                else:
                    size = min(2 * size, most)
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
    return min(j_public, cap) if cfg["cap_at_public"] else cap


def _lex_sets(n: int, k: int) -> np.ndarray:
    """Every k-subset of range(n), in lexicographic order: (comb(n, k), k)."""
    flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), dtype=np.int64)
    return flat.reshape(-1, k) if k else np.zeros((1, 0), dtype=np.int64)


def _combo_parts(n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every m-subset of range(n) in lexicographic order, as a head (its h least groups) and a tail (the other t):
    (heads, tails, head_of, tail_of), set i = heads[head_of[i]] ∪ tails[tail_of[i]]. The sets of one head are the
    tails starting after its last group, in their own lexicographic order: a suffix of `tails`."""
    h = m // 2
    if max(math.comb(n, h), math.comb(n, m - h)) > math.comb(n, m):  # m close to n: the tails alone
        h = 0
    heads, tails = _lex_sets(n, h), _lex_sets(n, m - h)
    last = heads[:, -1] if h else np.full(1, -1)
    start = np.searchsorted(tails[:, 0], last + 1)  # the first tail starting after the head's last group
    size = tails.shape[0] - start
    head_of = np.repeat(np.arange(heads.shape[0]), size)
    tail_of = np.arange(int(size.sum())) + np.repeat(start - (np.cumsum(size) - size), size)
    return heads, tails, head_of, tail_of


def _exact(
    pool: SplitPool,
    lam: float,
    mu: float,
    cap_public: float,
    slack: float,
    chunk: int,
    cfg: dict,
    public_mask: np.ndarray | None = None,
) -> Selection:
    """Every eval set of size m. Eligible sets, in order of precedence:
    1. worst family deviation D(S) = max_t |n_t/N_t − r| (points) ≤ max(max_family_deviation_pts, min_S D(S)): the
       bound, or the best any set reaches when none meets it (null bound: every set);
    2. with `families_not_worse_than_public` (public set given): no family's eval count farther from its target than
       under the public rule, unless no set of step 1 qualifies (the public set breaks the bound): then this rule is
       set aside, and D(ours) ≤ bound < D(public) anyway.
    Among them phase 1 min J, then min J + lam·(L + mu·L1) subject to J ≤ J* + slack, and ≤ J(public) when the
    public set is eligible (cap_at_public). Ties go to the first set in lexicographic order of group indices."""
    n, m = pool.n, pool.n_eval
    dominance = public_mask is not None and bool(cfg["families_not_worse_than_public"])
    if dominance:
        limit = np.abs(pool.counts[public_mask].sum(0) - pool.target) + 1e-9
    heads, tails, head_of, tail_of = _combo_parts(n, m)
    # integer-valued float64 counts: a set's counts as head sum + tail sum are exact, as the group-by-group sum was
    c_head, c_tail = pool.counts[heads].sum(1), pool.counts[tails].sum(1)
    J_all, D_all, dom_all = [], [], []
    work = None
    for s in range(0, head_of.size, chunk):
        C = c_head[head_of[s : s + chunk]] + c_tail[tail_of[s : s + chunk]]
        if work is None or work["d"].shape != C.shape:
            work = pool.share_work(C.shape)
        J_all.append(_q(pool.share_obj(C, C.sum(1), work)))
        absdev = work["d"]  # |C − target|, computed by share_obj
        D_all.append(_q(pool.worst_dev_pts(C, absdev)))
        if dominance:
            dom_all.append((absdev <= limit).all(1))
    J, D = np.concatenate(J_all), np.concatenate(D_all)
    d_best = float(D.min())
    bound = cfg.get("max_family_deviation_pts")
    level = math.inf if bound is None else max(float(_q(bound)), d_best)
    ok = D <= level
    relaxed = False
    if dominance:
        ok_dom = ok & np.concatenate(dom_all)
        relaxed = not ok_dom.any()
        ok = ok if relaxed else ok_dom
    J = np.where(ok, J, np.inf)  # ineligible sets never win
    best = int(np.argmin(J))
    if public_mask is not None and float(_q(pool.worst_dev_pts(pool.counts[public_mask].sum(0)))) > level:
        cap_public = math.inf  # the public set breaks the bound: J(ours) may exceed J(public)
    if lam > 0 and pool.letters is not None:
        cap = _q(_share_cap(cfg, cap_public, float(J[best]), slack))
        feas = np.flatnonzero(J <= cap)  # ascending: keeps the lexicographic tie order
        K = np.empty(feas.size)
        l_head = pool.letters[:, heads, :].sum(2)  # (K, sets, T): exact integer sums as above
        l_tail = pool.letters[:, tails, :].sum(2)
        for s in range(0, feas.size, chunk):
            f = feas[s : s + chunk]
            Lc = l_head[:, head_of[f], :] + l_tail[:, tail_of[f], :]
            K[s : s + chunk] = _q(J[feas[s : s + chunk]] + lam * (pool.letter_obj(Lc) + mu * pool.letter_l1(Lc)))
        best = int(feas[int(np.argmin(K))])
    mask = np.zeros(n, dtype=bool)
    mask[heads[head_of[best]]] = True
    mask[tails[tail_of[best]]] = True
    ev = pool.evaluate(mask)
    return Selection(mask, ev["share"], ev["letters"], "exact", best_worst_dev_pts=d_best, dominance_relaxed=relaxed)


def _budget(cfg: dict, name: str, cost: int) -> int:
    """Iterations from a fixed work budget (so the count depends on the pool's size, never on the clock)."""
    n = int(float(cfg[f"{name}_budget"]) // max(cost, 1))
    return int(min(int(cfg[f"max_{name}"]), max(int(cfg[f"min_{name}"]), n)))


def our_rule(pool: SplitPool, policy: dict, seed: int, baseline: Selection | None = None) -> Selection:
    """Our selection: J(ours) ≤ J(public) on the same pool, then balanced answer letters (module docstring)."""
    cfg = policy["ours"]
    lam = float(policy["objective"]["letter_weight"]) if pool.letters is not None else 0.0
    mu = float(cfg["letter_l1_weight"])
    if pool.n == 0:
        return Selection(np.zeros(0, dtype=bool), 0.0, 0.0, "empty")
    baseline = baseline or public_rule(pool, policy)
    slack = float(cfg["share_slack"])
    if math.comb(pool.n, pool.n_eval) <= int(cfg["exact_max_combinations"]):
        return _exact(pool, lam, mu, baseline.share, slack, int(cfg["exact_chunk"]), cfg, public_mask=baseline.mask)

    sweeps, rho = int(cfg["max_sweeps"]), float(cfg["cap_penalty"])
    top = int(cfg["letter_candidates"])
    cost = pool.n_eval * (pool.n - pool.n_eval)
    restarts = _budget(cfg, "restarts", cost)
    # phase 1, the share objective J: the public set, then seeded random sets, each to a swap-local optimum
    phase1 = []
    for r in range(restarts):
        if r == 0:
            start = baseline.mask
        else:
            start = np.zeros(pool.n, dtype=bool)
            start[np_rng(seed, "split-start", pool.source, r).permutation(pool.n)[: pool.n_eval]] = True
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
        for _ in range(_budget(cfg, "ils", cost)):
            st = best.copy()
            st.kick(r_ils, int(cfg["ils_kick"]))
            st.sweep(r_ils, sweeps)
            if _q(st.J) <= _q(cap) and _q(st.K) < _q(best.K):
                best = st
        # the public set itself when it is within the cap and better on J + letters: ours never loses on both
        pub = _State(pool, baseline.mask, lam, mu, cap, rho, top)
        if _q(pub.J) <= _q(cap) and _q(pub.K) < _q(best.K):
            best = pub
    ev = pool.evaluate(best.mask)
    return Selection(best.mask.copy(), ev["share"], ev["letters"], "local_search")
