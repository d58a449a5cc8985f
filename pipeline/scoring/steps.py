"""The step scorer: step predictions (a list of 1 / -1 per item, or model text in the answer format of
pipeline/steps/parse.py) against the release's step eval files.

    score_table(eval_df, sft_df, preds) -> (steps, items)  one row per scored step / per item, with the baselines
    step_metrics(steps, items, sc) -> {"overall", "by_source", "by_level", "cells", "definitions"}
    markdown(m) -> the report's step section

Every metric and baseline is defined by formula in STEP_METRIC_DEFINITIONS (the one place: docs/release-format.md
and the dataset card quote it). Intervals resample split groups with the MCQ scorer's bootstrap
(pipeline/scoring/bootstrap.py group_bootstrap: same seed, same minimum-groups rule). `processbench score` reads the
predictions file (jsonl rows {"item_id", "prediction"}, pipeline/scoring/mcq.py read_predictions) and calls score_steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


import numpy as np
import polars as pl

from pipeline.scoring.bootstrap import ci_text, fmt, group_bootstrap
from pipeline.scoring.outcomes import item_outcome, outcome_counts
from pipeline.steps import baselines
from pipeline.steps.metrics import coin_counts, confusion, macro_f1
from pipeline.steps.parse import parse_steps
from pipeline.steps.tables import kind_class, step_rows

if TYPE_CHECKING:
    from pipeline.settings.models import ExportsScore

STEP_METRIC_DEFINITIONS = {
    "macro_f1": "step macro-F1 (the headline; VisualProcessBench): over the slice's scored steps (gold 1 or -1; "
    "neutral 0 steps are never scored), F1_c = 2·TP_c / (2·TP_c + FP_c + FN_c) for c = correct (gold 1) "
    "and c = incorrect (gold -1), averaged over the classes present in gold or prediction; a step of an "
    "invalid or missing prediction counts as predicted the opposite of its gold label.",
    "first_error": "first-error score (Qwen ProcessBench): 2·a·b / (a + b), a = share of items with an error whose "
    "predicted earliest error (the first scored step predicted -1) is the gold first_error_index, b = "
    "share of error-free items predicted with no error; invalid and missing predictions are wrong; "
    "null when the slice has no item of one kind.",
    "kind_recall": "per error kind (natural_* kinds from the sources' failure annotations, the others injected): "
    "share of the slice's steps of that kind predicted -1.",
    "invalid_rate": "share of items whose prediction is invalid (no <STEPS> tag, a verdict other than + / -, a verdict "
    "count other than num_steps) or missing.",
    "all_correct": "the metrics of predicting + for every step (first-error: a = 0, so 0 when the slice has both "
    "kinds of item).",
    "coin_flip": "the expected metrics of a fair coin per step: macro-F1 of the expected confusion counts (each "
    "scored step half predicted 1, half -1); first-error 2·a·b / (a + b) of the expected accuracies "
    "(an item with an error is hit with probability 0.5^j, j = its scored steps up to and including the "
    "first error; an error-free item with 0.5^m, m = its scored steps).",
    "position_prior": "predict -1 where the SFT share of wrong steps at (source, step count, position) - or, unseen, "
    "at (source, position) - is above the source's SFT share of wrong steps, else +.",
    "ci95": "percentile interval (score.ci) of the metric over score.bootstrap_samples resamples of the slice's split "
    "groups with replacement (cluster bootstrap, seeded by score.seed); null (ci95_note says why) with fewer "
    "than score.min_ci_groups groups or when every resample gives the same value.",
}
BASELINE_NAMES = ("all_correct", "coin_flip", "position_prior")


def first_error_score(tot: np.ndarray) -> np.ndarray:
    """2ab/(a+b) of totals (... x 4: error-item hits, error items, clean-item hits, clean items); nan when a kind of
    item is absent, 0 when a + b = 0."""
    tot = np.atleast_2d(np.asarray(tot, dtype=float))
    with np.errstate(invalid="ignore", divide="ignore"):
        a, b = tot[:, 0] / tot[:, 1], tot[:, 2] / tot[:, 3]
        h = np.where(a + b > 0, 2 * a * b / (a + b), 0.0)
    return np.where((tot[:, 1] > 0) & (tot[:, 3] > 0), h, np.nan)


def _first_error(gold: list[int], pred: list[int] | None) -> int:
    """The earliest scored step (gold != 0) predicted -1, else -1."""
    for i, (g, p) in enumerate(zip(gold, pred or [])):
        if g != 0 and p == -1:
            return i
    return -1


def _item_counts(gold: list[int], pred: list[int] | None) -> tuple[float, float, float, float]:
    true_first = _first_error(gold, gold)
    hit = float(pred is not None and _first_error(gold, pred) == true_first)
    return (hit, 1.0, 0.0, 0.0) if true_first >= 0 else (0.0, 0.0, hit, 1.0)


def _coin_item(gold: list[int]) -> tuple[float, float, float, float]:
    first = _first_error(gold, gold)
    if first >= 0:
        return (0.5 ** sum(1 for g in gold[: first + 1] if g != 0), 1.0, 0.0, 0.0)
    return (0.0, 0.0, 0.5 ** sum(1 for g in gold if g != 0), 1.0)


def score_table(eval_df: pl.DataFrame, sft_df: pl.DataFrame, preds: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(steps, items): one row per scored eval step (cell, group, gold, prediction, kind, confusion counts of the
    model and of each baseline) and one row per eval item (validity, first-error counts of the model and baselines)."""
    ev_steps = step_rows(eval_df)
    verdict = {
        "all_correct": baselines.all_correct(ev_steps),
        "position_prior": baselines.position_prior(step_rows(sft_df), ev_steps),
    }
    by_item: dict[str, list[int]] = {}
    for s, i in zip(ev_steps, range(len(ev_steps))):
        by_item.setdefault(s["item_id"], []).append(i)
    steps, items = [], []
    for r in eval_df.select("item_id", "source", "eval_level", "split_group_id", "num_steps", "response").iter_rows(
        named=True
    ):
        idx = by_item.get(r["item_id"], [])
        gold = [ev_steps[i]["gold"] for i in idx]
        pred = parse_steps(preds.get(r["item_id"]), int(r["num_steps"])) if r["item_id"] in preds else None
        base = {
            "item_id": r["item_id"],
            "source": r["source"],
            "level": ev_steps[idx[0]]["level"] if idx else "none",
            "split_group_id": r["split_group_id"],
        }
        row = {
            **base,
            "invalid": float(pred is None),
            "missing": float(r["item_id"] not in preds),
            **dict(zip(("fe_hit", "fe_err", "fe_clean_hit", "fe_clean"), _item_counts(gold, pred))),
            "coin_flip": list(_coin_item(gold)),
        }
        for name, v in verdict.items():
            row[name] = list(_item_counts(gold, [v[i] for i in idx]))
        items.append(row)
        for k, i in enumerate(idx):
            g = gold[k]
            if g == 0:
                continue
            p = pred[k] if pred is not None else -g
            s = ev_steps[i]
            steps.append(
                {
                    **base,
                    "position": s["position"],
                    "gold": g,
                    "prediction": p,
                    "kind": s["kind"],
                    "kind_class": kind_class(s["kind"]),
                    "model": list(confusion(g, p)),
                    "coin_flip": list(coin_counts(g)),
                    **{n: list(confusion(g, v[i])) for n, v in verdict.items()},
                }
            )
    step_schema = {"kind": pl.String, "kind_class": pl.String}
    return pl.DataFrame(steps, schema_overrides=step_schema), pl.DataFrame(items)


def _sums(df: pl.DataFrame, col: str) -> np.ndarray:
    return np.asarray(df[col].to_list(), dtype=float).reshape(-1, 4).sum(axis=0) if df.height else np.zeros(4)


def _group_sums(df: pl.DataFrame, col: str) -> np.ndarray:
    gids = df["split_group_id"].to_list()
    groups = sorted(set(gids))
    index = {g: i for i, g in enumerate(groups)}
    gi = np.array([index[g] for g in gids], dtype=np.int64)
    out = np.zeros((len(groups), 4))
    np.add.at(out, gi, np.asarray(df[col].to_list(), dtype=float).reshape(-1, 4))
    return out


def _value(fn, tot: np.ndarray):
    v = float(fn(tot)[0])
    return None if np.isnan(v) else round(v, 4)


def _metric(df: pl.DataFrame, col: str, fn, sc: ExportsScore, name: str) -> dict:
    out = {name: _value(fn, _sums(df, col))}
    ci, note = (None, "not estimable: no rows") if not df.height else group_bootstrap(_group_sums(df, col), fn, sc)
    out[f"{name}_ci95"] = ci
    if note:
        out[f"{name}_ci95_note"] = note
    return out


def _recall(tot: np.ndarray) -> np.ndarray:
    return tot[:, 0] / tot[:, 1]


def _recalls(steps: pl.DataFrame, col: str, sc: ExportsScore) -> dict:
    """Recall of -1 per value of `col` (error kind, natural / injected) with its interval."""
    out = {}
    wrong = steps.filter(pl.col(col).is_not_null()) if steps.height else steps
    for k in sorted(set(wrong[col].to_list())) if wrong.height else []:
        sub = wrong.filter(pl.col(col) == k)
        hits = (sub["prediction"] == -1).cast(pl.Float64)
        df = pl.DataFrame({"split_group_id": sub["split_group_id"], "r": [[h, 1.0, 0.0, 1.0] for h in hits.to_list()]})
        ci, note = group_bootstrap(_group_sums(df, "r"), _recall, sc)
        out[k] = {
            "n": sub.height,
            "recall": round(float(hits.mean()), 4),
            "recall_ci95": ci,
            **({"recall_ci95_note": note} if note else {}),
        }
    return out


def block(steps: pl.DataFrame, items: pl.DataFrame, sc: ExportsScore) -> dict:
    """Every step metric of one slice (its scored steps and its items)."""
    out = {
        "n_items": items.height,
        "n_steps": steps.height,
        "n_groups": int(items["split_group_id"].n_unique()) if items.height else 0,
        "invalid_rate": round(float(items["invalid"].mean()), 4) if items.height else None,
    }
    out.update(_metric(steps, "model", macro_f1, sc, "macro_f1"))
    fe = (
        items.select(pl.concat_list("fe_hit", "fe_err", "fe_clean_hit", "fe_clean").alias("fe"), "split_group_id")
        if items.height
        else pl.DataFrame({"fe": [], "split_group_id": []})
    )
    out.update(_metric(fe, "fe", first_error_score, sc, "first_error"))
    t = _sums(fe, "fe")
    out["first_error_parts"] = {
        "error_items": int(t[1]),
        "error_accuracy": None if not t[1] else round(t[0] / t[1], 4),
        "clean_items": int(t[3]),
        "clean_accuracy": None if not t[3] else round(t[2] / t[3], 4),
    }
    out["baselines"] = {
        b: {"macro_f1": _value(macro_f1, _sums(steps, b)), "first_error": _value(first_error_score, _sums(items, b))}
        for b in BASELINE_NAMES
    }
    out["by_kind"] = _recalls(steps, "kind", sc)
    out["by_kind_class"] = _recalls(steps, "kind_class", sc)
    return out


def step_metrics(steps: pl.DataFrame, items: pl.DataFrame, sc: ExportsScore) -> dict:
    out = {"overall": block(steps, items, sc)}
    for key, col in (("by_source", "source"), ("by_level", "level")):
        out[key] = {
            v: block(steps.filter(pl.col(col) == v), items.filter(pl.col(col) == v), sc)
            for v in sorted(set(items[col].to_list()))
        }
    cells = sorted(set(items.select("source", "level").iter_rows()), key=lambda c: (c[1], c[0]))
    out["cells"] = [
        {
            "source": s,
            "level": lv,
            **block(
                steps.filter((pl.col("source") == s) & (pl.col("level") == lv)),
                items.filter((pl.col("source") == s) & (pl.col("level") == lv)),
                sc,
            ),
        }
        for s, lv in cells
    ]
    out["definitions"] = STEP_METRIC_DEFINITIONS
    return out


def markdown(m: dict) -> str:
    """The step track's section of metrics.md."""
    head = (
        "| items | steps | invalid | macro-F1 | 95 % CI | first-error | 95 % CI | all-correct F1 | coin F1 "
        "| position-prior F1 | all-correct FE | coin FE | position-prior FE |"
    )
    lines = ["## Step track (T13)", "", "| slice " + head, "|" + "---|" * 14]

    def cols(b: dict) -> str:
        bl = b["baselines"]
        return (
            f"| {b['n_items']} | {b['n_steps']} | {fmt(b['invalid_rate'])} | {fmt(b['macro_f1'])} | "
            f"{ci_text(b['macro_f1_ci95'])} | {fmt(b['first_error'])} | {ci_text(b['first_error_ci95'])} | "
            + " | ".join(fmt(bl[n]["macro_f1"]) for n in BASELINE_NAMES)
            + " | "
            + " | ".join(fmt(bl[n]["first_error"]) for n in BASELINE_NAMES)
            + " |"
        )

    o = m["predictions"]["outcomes"]
    lines[1:1] = [
        "Outcomes: "
        + ", ".join(f"{k} {v}" for k, v in o.items() if k != "server_answered")
        + f" ({o['server_answered']} answered by the server). Denominators: every metric scores every step of every "
        "eval item of the slice; a step of an invalid, refused, truncated-past-parsing, empty, failed or missing "
        "prediction counts as predicted the opposite of its gold label.",
        "",
    ]
    lines.append("| overall " + cols(m["overall"]))
    for key in ("by_level", "by_source"):
        lines += [f"| {key[3:]} {name} " + cols(b) for name, b in m[key].items()]
    lines += [f"| {c['source']} / {c['level']} " + cols(c) for c in m["cells"]]
    lines += [
        "",
        "Recall of wrong steps per error kind (overall):",
        "",
        "| kind | steps | recall | 95 % CI |",
        "|---|---:|---:|---|",
    ]
    for group in ("by_kind_class", "by_kind"):
        lines += [
            f"| {k} | {v['n']} | {fmt(v['recall'])} | {ci_text(v['recall_ci95'])} |"
            for k, v in m["overall"][group].items()
        ]
    lines += ["", "Step definitions:", ""] + [f"- **{k}**: {v}" for k, v in m["definitions"].items()]
    return "\n".join(lines) + "\n"


def score_steps(
    tables: dict[str, pl.DataFrame],
    preds: dict,
    file_name: str,
    sc: ExportsScore,
    levels: list[str] | None = None,
    outcomes: dict[str, str] | None = None,
) -> tuple[dict, pl.DataFrame]:
    """The step metrics of predictions ({item_id: prediction}, from the file `file_name`) against the step tables
    ({"eval", "sft"}; `levels` selects eval levels), with the per-step rows. Missing predictions are invalid; extra
    ones are counted. `outcomes` (item id -> the predictions row's outcome): a refused answer is invalid whatever it
    says, and `predictions.outcomes` counts every eval item's outcome (pipeline/scoring/mcq.py OUTCOME_NAMES)."""
    ev = tables["eval"]
    all_ids = set(ev["item_id"].to_list())
    if levels:
        ev = ev.filter(pl.col("eval_level").fill_null("none").is_in(list(levels)))
    known = set(ev["item_id"].to_list())
    outcomes = outcomes or {}
    preds = {k: (None if outcomes.get(k) == "refused" else v) for k, v in preds.items()}
    per_item = [
        item_outcome(
            outcomes.get(i, "answered" if preds.get(i) is not None else None) if i in preds else None,
            parse_steps(preds.get(i), n) is not None,
        )
        for i, n in zip(ev["item_id"].to_list(), ev["num_steps"].to_list())
    ]
    steps, items = score_table(ev, tables["sft"], preds)
    m = step_metrics(steps, items, sc)
    missing, extra = sorted(known - set(preds)), sorted(set(preds) - all_ids)
    m["predictions"] = {
        "file": file_name,
        "missing": len(missing),
        "extra": len(extra),
        "other_levels": len((set(preds) & all_ids) - known),
        "missing_examples": missing[:10],
        "extra_examples": extra[:10],
        "outcomes": outcome_counts(per_item),
    }
    return m, steps.select("item_id", "source", "level", "position", "gold", "prediction", "kind")
