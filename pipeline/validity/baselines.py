"""Baselines that never look at an image, trained on SFT rows and scored on eval rows of one (source, family).

Rows are dicts of the release row schema (docs/release-format.md): `question`, `choice_A`..`choice_F`, `answer`
(letter), `answer_text`, `num_choices`. Every baseline picks one of the item's own options, so a baseline that
learnt nothing scores `random` in expectation. A tie between top-scored options earns its expectation under a
uniform tie-break (1/t per tied answer, `credit`), never the earliest option's: with label-balanced SFT rows the
labels tie, and "the earliest tied option" is a position habit whose luck on one file's letter layout is no text
signal (release-scale AIST T4 L2: three labels tied at 381 SFT answers each; the earliest of them scored 0.291
against the level prior 0.261, its expectation 0.246). The report stays deterministic.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pipeline.release.schema import CHOICE_LETTERS as LETTERS
from pipeline.settings.models import ValidityBagOfWords


def options(row: dict) -> list[str]:
    return [row[f"choice_{c}"] for c in LETTERS[: int(row["num_choices"])] if row.get(f"choice_{c}") is not None]


def _acc(hits: list[float]) -> float | None:
    return round(sum(hits) / len(hits), 4) if hits else None


def credit(opts: list[str], score: dict[str, float], answer: str) -> float:
    """The expected hit of picking among the top-scored options uniformly: 1/t when the answer is one of t tied."""
    top = max(score.get(o, 0.0) for o in opts)
    tied = [o for o in opts if score.get(o, 0.0) == top]
    return 1.0 / len(tied) if answer in tied else 0.0


def random_acc(eval_rows: list[dict]) -> float | None:
    return _acc_frac([1.0 / len(options(r)) for r in eval_rows])


def _acc_frac(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def label_prior(sft_rows: list[dict]) -> Counter:
    return Counter(r["answer_text"] for r in sft_rows)


def label_prior_acc(sft_rows: list[dict], eval_rows: list[dict]) -> float | None:
    """Predict the option whose label text is most frequent as an SFT answer."""
    prior = label_prior(sft_rows)
    return _acc([credit(options(r), prior, r["answer_text"]) for r in eval_rows])


def eval_label_share(eval_rows: list[dict]) -> float | None:
    """Share of the most frequent answer label in eval (what a perfect label prior would score)."""
    c = Counter(r["answer_text"] for r in eval_rows)
    return round(max(c.values()) / len(eval_rows), 4) if eval_rows else None


def majority_letter_acc(sft_rows: list[dict], eval_rows: list[dict]) -> float | None:
    c = Counter(r["answer"] for r in sft_rows)
    letter = max(LETTERS, key=lambda x: (c.get(x, 0), -LETTERS.index(x)))
    return _acc([r["answer"] == letter for r in eval_rows])


def _keyed_acc(sft_rows: list[dict], eval_rows: list[dict], key) -> float | None:
    """Per key, the most frequent SFT answer text among the item's options; the label prior for unseen keys."""
    return keyed_acc([key(r) for r in sft_rows], sft_rows, [key(r) for r in eval_rows], eval_rows)


def keyed_acc(sft_keys: list, sft_rows: list[dict], eval_keys: list, eval_rows: list[dict]) -> float | None:
    """_keyed_acc with the keys given beside the rows (None: no key, the label prior)."""
    prior = label_prior(sft_rows)
    seen: dict[object, Counter] = defaultdict(Counter)
    for k, r in zip(sft_keys, sft_rows):
        if k is not None:
            seen[k][r["answer_text"]] += 1
    hits = []
    for k, r in zip(eval_keys, eval_rows):
        c = seen.get(k) if k is not None else None
        score = {o: c.get(o, 0) + prior.get(o, 0) / (1.0 + sum(prior.values())) for o in options(r)} if c else prior
        hits.append(credit(options(r), score, r["answer_text"]))
    return _acc(hits)


def memoriser_acc(sft_rows: list[dict], eval_rows: list[dict]) -> float | None:
    """(question, set of option texts) -> most frequent SFT answer text (the cell fixes source and family)."""
    return _keyed_acc(sft_rows, eval_rows, lambda r: (r["question"], frozenset(options(r))))


def option_only_acc(sft_rows: list[dict], eval_rows: list[dict]) -> float | None:
    """The set of option texts alone -> most frequent SFT answer text."""
    return _keyed_acc(sft_rows, eval_rows, lambda r: frozenset(options(r)))


def _bow_text(r: dict) -> str:
    # options as whole tokens (their set is what leaks), question words as they are
    return r["question"] + " " + " ".join("opt_" + "_".join(o.split()) for o in options(r))


def bag_of_words_acc(sft_rows: list[dict], eval_rows: list[dict], C: float = 1.0, max_iter: int = 200) -> float | None:
    """A logistic regression over word counts of question + option texts predicting the answer text; the item's
    option with the highest probability is the prediction."""
    if not eval_rows:
        return None
    labels = sorted({r["answer_text"] for r in sft_rows})
    if len(labels) < 2:
        return label_prior_acc(sft_rows, eval_rows)
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = CountVectorizer(token_pattern=r"[^\s]+", lowercase=True, ngram_range=(1, 2), binary=True)
    x = vec.fit_transform([_bow_text(r) for r in sft_rows])
    model = LogisticRegression(C=C, max_iter=max_iter)
    model.fit(x, [r["answer_text"] for r in sft_rows])
    proba = model.predict_proba(vec.transform([_bow_text(r) for r in eval_rows]))
    classes = list(model.classes_)
    hits = []
    for r, p in zip(eval_rows, proba):
        score = {o: float(p[classes.index(o)]) if o in classes else -1.0 for o in options(r)}
        hits.append(credit(options(r), score, r["answer_text"]))
    return _acc(hits)


def cell_baselines(sft_rows: list[dict], eval_rows: list[dict], bow: ValidityBagOfWords | None = None) -> dict:
    bow = bow or ValidityBagOfWords()
    out = {
        "eval_n": len(eval_rows),
        "sft_n": len(sft_rows),
        "random": random_acc(eval_rows),
        "label_prior": label_prior_acc(sft_rows, eval_rows),
        "eval_label_share": eval_label_share(eval_rows),
        "majority_letter": majority_letter_acc(sft_rows, eval_rows),
        "memoriser": memoriser_acc(sft_rows, eval_rows),
        "bag_of_words": bag_of_words_acc(sft_rows, eval_rows, float(bow.C), int(bow.max_iter)) if sft_rows else None,
        "option_only": option_only_acc(sft_rows, eval_rows),
    }
    blind = [v for v in (out["memoriser"], out["bag_of_words"]) if v is not None]
    out["blind"] = max(blind) if blind else None
    return out
