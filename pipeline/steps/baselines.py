"""Step predictors that never look at an image, shared by the step scorer (its reported baselines) and the blind
gates of the validity audit. Each maps SFT steps (training) and eval steps (pipeline/steps/tables.py step_rows) to
one verdict (1 / -1) per eval step; only scored steps (gold 1 / -1) train them.

    all_correct(eval)                        every step + (a fair coin's expected counts: metrics.py coin_counts)
    position_prior(sft, eval)                - where the SFT wrong share at (source, step count, position) is above the
                                             source's SFT wrong share, else +
    ngram(sft, eval, order, alpha)           class-conditional n-gram models of SFT step chains (sentences as tokens):
                                             - where the step is likelier after its predecessors in wrong than in
                                             correct chains
    text_classifier(sft, eval, C, max_iter)  logistic regression (class-balanced) on the words of the step and of its
                                             neighbours, its position, its distance from the end and the step count
    boosted(sft, eval, params)               gradient-boosted trees (class-balanced) on other features: the words of
                                             the step, of two neighbours each side and of the item's last step,
                                             hashed per place; the position, distance from the end, step count
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict


def scored(steps: list[dict]) -> list[dict]:
    return [s for s in steps if s["gold"] in (1, -1)]


def all_correct(eval_steps: list[dict]) -> list[int]:
    return [1] * len(eval_steps)


def position_prior(sft_steps: list[dict], eval_steps: list[dict]) -> list[int]:
    wrong: dict[tuple, Counter] = defaultdict(Counter)
    for s in scored(sft_steps):
        for key in ((s["source"], s["num_steps"], s["position"]), (s["source"], s["position"]), (s["source"],)):
            wrong[key][s["gold"]] += 1

    def rate(key):
        c = wrong.get(key)
        return c[-1] / (c[-1] + c[1]) if c else None

    out = []
    for s in eval_steps:
        base = rate((s["source"],))
        r = rate((s["source"], s["num_steps"], s["position"]))
        r = rate((s["source"], s["position"])) if r is None else r
        out.append(-1 if base is not None and r is not None and r > base + 1e-12 else 1)
    return out


BOS = "<s>"


class _ChainModel:
    """An n-gram model over step sentences (each sentence one token), interpolated Dirichlet smoothing down to an
    add-one unigram."""

    def __init__(self, order: int, alpha: float, vocab: int):
        self.order, self.alpha, self.vocab = order, alpha, vocab
        self.counts: dict[tuple, Counter] = defaultdict(Counter)
        self.n = 0

    def add(self, context: tuple, token: str) -> None:
        self.n += 1
        for k in range(len(context) + 1):
            self.counts[context[len(context) - k :]][token] += 1

    def logp(self, context: tuple, token: str) -> float:
        p = (self.counts[()][token] + 1) / (self.n + self.vocab + 1)
        for k in range(1, len(context) + 1):
            c = self.counts.get(context[len(context) - k :])
            if c:
                p = (c[token] + self.alpha * p) / (sum(c.values()) + self.alpha)
        return math.log(p)


def _context(steps_of_item: list[str], i: int, order: int) -> tuple:
    ctx = [BOS] * (order - 1) + steps_of_item[:i]
    return tuple(ctx[len(ctx) - (order - 1) :]) if order > 1 else ()


def _chains(steps: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for s in steps:
        out[s["item_id"]].append(s["sentence"])
    return out


def ngram(sft_steps: list[dict], eval_steps: list[dict], order: int = 2, alpha: float = 1.0) -> list[int]:
    train = scored(sft_steps)
    if not any(s["gold"] == -1 for s in train) or not any(s["gold"] == 1 for s in train):
        return all_correct(eval_steps)
    vocab = len({s["sentence"] for s in sft_steps})
    models = {g: _ChainModel(order, alpha, vocab) for g in (1, -1)}
    chains = _chains(sft_steps)
    for s in train:
        models[s["gold"]].add(_context(chains[s["item_id"]], s["position"], order), s["sentence"])
    eval_chains = _chains(eval_steps)
    out = []
    for s in eval_steps:
        ctx = _context(eval_chains[s["item_id"]], s["position"], order)
        out.append(-1 if models[-1].logp(ctx, s["sentence"]) > models[1].logp(ctx, s["sentence"]) else 1)
    return out


def _document(s: dict) -> str:
    words = s["sentence"].lower().split()
    prev = (s["previous"] or "").lower().split()
    nxt = (s.get("next") or "").lower().split()
    n, i = s["num_steps"], s["position"]
    return " ".join(
        words
        + [f"prev_{w}" for w in prev]
        + [f"next_{w}" for w in nxt]
        + [f"pos_{i}", f"n_{n}", f"pos_{i}_of_{n}", f"from_end_{n - 1 - i}"]
    )


def text_classifier(sft_steps: list[dict], eval_steps: list[dict], C: float = 1.0, max_iter: int = 200) -> list[int]:
    train = scored(sft_steps)
    if len({s["gold"] for s in train}) < 2:
        return [train[0]["gold"] if train else 1] * len(eval_steps)
    if not eval_steps:
        return []
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = CountVectorizer(token_pattern=r"[^\s]+", lowercase=False, ngram_range=(1, 2), binary=True)
    x = vec.fit_transform([_document(s) for s in train])
    model = LogisticRegression(C=C, max_iter=max_iter, class_weight="balanced", solver="liblinear", random_state=0)
    model.fit(x, [s["gold"] for s in train])
    return [int(v) for v in model.predict(vec.transform([_document(s) for s in eval_steps]))]


BOOSTED_HASHED = 32  # hashed word features per neighbour


def _tree_features(steps: list[dict]) -> list[list[float]]:
    """Per step: the words of the step, of two neighbours each side and of the item's last step, each hashed into
    BOOSTED_HASHED binary features; the position, the distance from the end and the step count. Items are read from
    `steps` in their order."""
    import zlib

    chains = _chains(steps)
    out = []
    for s in steps:
        chain, i, n = chains[s["item_id"]], s["position"], s["num_steps"]
        row = []
        for j in (i, i - 1, i - 2, i + 1, i + 2, len(chain) - 1):
            bits = [0.0] * BOOSTED_HASHED
            for w in (chain[j] if 0 <= j < len(chain) else "").lower().split():
                bits[zlib.crc32(w.encode()) % BOOSTED_HASHED] = 1.0
            row += bits
        out.append(row + [float(i), float(n - 1 - i), float(n)])
    return out


def boosted(sft_steps: list[dict], eval_steps: list[dict], params: dict | None = None) -> list[int]:
    """Gradient-boosted trees (scikit-learn's HistGradientBoostingClassifier, class-balanced, fixed seed) on
    _tree_features: a model family and feature set apart from the linear text classifier's bag of words."""
    train = scored(sft_steps)
    if len({s["gold"] for s in train}) < 2:
        return [train[0]["gold"] if train else 1] * len(eval_steps)
    if not eval_steps:
        return []
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier

    keep = {id(s) for s in train}
    x = np.asarray([row for s, row in zip(sft_steps, _tree_features(sft_steps)) if id(s) in keep])
    p = dict(params or {})
    model = HistGradientBoostingClassifier(
        class_weight="balanced",
        early_stopping=False,
        random_state=0,
        max_iter=int(p.get("max_iter", 100)),
        learning_rate=float(p.get("learning_rate", 0.1)),
        max_leaf_nodes=int(p.get("max_leaf_nodes", 15)),
        min_samples_leaf=int(p.get("min_samples_leaf", 20)),
    )
    model.fit(x, [s["gold"] for s in train])
    return [int(v) for v in model.predict(np.asarray(_tree_features(eval_steps)))]
