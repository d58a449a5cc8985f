"""Bias-free scores beside accuracy (`processbench score`, key `bias_free` of metrics.json).

Accuracy rewards a habit whenever the key leans the same way: a model that always answers "the order shown" (T8),
"the left panel" (T9), "middle" (T5) or "success" (T7) scores at or above chance on a balanced family without looking.
These scores are zero for any such habit and positive only when the answer follows what the images show:

- T8 `kendall_tau`: Kendall's tau between the predicted and the true order of the three frames (+1 right order,
  -1 reversed, 0 expected for any guess); `pairwise_concordance` = share of the three frame pairs put in the right
  order (0.5 by chance); `display_order_rate` = share of answers "in the order shown" (XYZ) beside `gold_display_rate`,
  its share in the key.
- T9 `left_habit_free`: hit rate when the left panel (X) is earlier minus the rate of answering "left" when it is
  later, P(X | X earlier) - P(X | Y earlier): 0 for always-left, always-right or a coin, 1 for a perfect answer.
- T5 `within_step_concordance`: over pairs of items of the same step (same unit and step frames; public items: same
  unit) whose true stages differ, the share whose predicted stages are ordered like their query frames (a tie counts
  half): 0.5 for any constant or random answer.
- T7 `success_minus_failure`: P(answer success | success) - P(answer success | failure): 0 for any label habit.
An unparseable answer counts as a coin flip (neutral: half of each pair, tau 0). Each score is given per source and
over the family's eval items, with the accuracy intervals' percentile bootstrap resampling split groups (exports.yaml
`score`: bootstrap_samples, seed, ci, min_ci_groups): null with a `ci95_note` when it is not estimable (too few groups,
or every resample giving the same value), never a zero-width interval.

    bias_free(eval_df, items, cfg) -> {family: {"all": block, "by_source": {slug: block}}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from collections import defaultdict
from typing import Callable

import numpy as np
import polars as pl

from pipeline.release.schema import CHOICE_LETTERS
from pipeline.scoring.bootstrap import group_bootstrap

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

STAGES = ("early", "middle", "late")


def _choice_text(row: dict, letter: str | None) -> str | None:
    if letter is None or letter not in CHOICE_LETTERS:
        return None
    return row.get(f"choice_{letter}")


def _boot(groups: list[str], sums: np.ndarray, stat: Callable[[np.ndarray], float | None], sc) -> dict:
    """Point value and the scorers' one split-group bootstrap (pipeline/scoring/bootstrap.py) of a statistic of summed
    per-group vectors: no interval (`ci95` null, `ci95_note` says why) with too few groups or when every resample
    agrees, never a zero-width one."""
    value = stat(sums.sum(axis=0))
    out = {"value": None if value is None else round(float(value), 4), "groups": len(groups), "ci95": None}
    if value is None:
        return out

    def values(tot: np.ndarray) -> np.ndarray:
        return np.array([np.nan if (v := stat(s)) is None else v for s in tot], dtype=float)

    ci, note = group_bootstrap(sums, values, sc)
    out["ci95"] = ci
    if note:
        out["ci95_note"] = note
    return out


def _per_group(rows: list[dict], contrib: Callable[[dict], np.ndarray], width: int):
    acc: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(width))
    for r in rows:
        acc[r["split_group_id"]] += contrib(r)
    groups = sorted(acc)
    return groups, np.array([acc[g] for g in groups]).reshape(len(groups), width)


def _ratio(i: int, j: int) -> Callable[[np.ndarray], float | None]:
    return lambda s: None if s[j] == 0 else s[i] / s[j]


def _two_rates(positive: bool, said: float) -> np.ndarray:
    """Per-item sums for P(said | positive) - P(said | negative): [said, 1, 0, 0] or [0, 0, said, 1]."""
    return np.array([said, 1.0, 0.0, 0.0]) if positive else np.array([0.0, 0.0, said, 1.0])


def _diff_of_rates(s: np.ndarray) -> float | None:
    return None if s[1] == 0 or s[3] == 0 else s[0] / s[1] - s[2] / s[3]


# ------------------------------------------------------------------------------------------- per family


def _t8(rows: list[dict], sc: dict) -> dict:
    def contrib(r):
        gold, pred = r["answer_text"], r["pred_text"]
        if pred is None or len(pred) != len(gold):
            tau, conc = 0.0, 0.5
        else:
            pos = {c: i for i, c in enumerate(gold)}
            seq = [pos[c] for c in pred]
            pairs = [(i, j) for i in range(len(seq)) for j in range(i + 1, len(seq))]
            good = sum(seq[i] < seq[j] for i, j in pairs)
            conc = good / len(pairs)
            tau = 2 * conc - 1
        shown = "".join(json.loads(r["display_labels_json"]) if r.get("display_labels_json") else "XYZ")
        return np.array([tau, conc, float(pred == shown), float(gold == shown), 1.0])

    g, s = _per_group(rows, contrib, 5)
    return {
        "kendall_tau": _boot(g, s, _ratio(0, 4), sc),
        "pairwise_concordance": _boot(g, s, _ratio(1, 4), sc),
        "display_order_rate": _boot(g, s, _ratio(2, 4), sc),
        "gold_display_rate": _boot(g, s, _ratio(3, 4), sc),
    }


def _t9(rows: list[dict], sc: dict) -> dict:
    def contrib(r):
        left = (json.loads(r["display_labels_json"]) if r.get("display_labels_json") else ["X"])[0]
        return _two_rates(r["answer_text"] == left, 0.5 if r["pred_text"] is None else float(r["pred_text"] == left))

    g, s = _per_group(rows, contrib, 4)
    return {
        "left_habit_free": _boot(g, s, _diff_of_rates, sc),
        "left_rate_when_left_earlier": _boot(g, s, _ratio(0, 1), sc),
        "left_rate_when_left_later": _boot(g, s, _ratio(2, 3), sc),
    }


def _stage(text: str | None, texts: dict[str, str]) -> int | None:
    for i, name in enumerate(STAGES):
        if text is not None and texts.get(name) == text:
            return i
    return None


def _t5(rows: list[dict], sc: dict, stage_texts: Callable[[dict], dict]) -> dict:
    steps: dict[tuple, list[tuple[int, int, float | None]]] = defaultdict(list)
    group_of: dict[tuple, str] = {}
    for r in rows:
        frames = json.loads(r["frame_indices_json"])
        spec = json.loads(r["render_spec_json"]) if r.get("render_spec_json") else None
        strip = spec is not None and (spec.get("labels") or [None])[-1] == "NOW"
        key = (r["source_slug"], r["source_unit_id"], tuple(frames[:-1]) if strip else ())
        query = frames[-1] if strip else frames[len(frames) // 2]
        texts = stage_texts(r)
        gold, pred = _stage(r["answer_text"], texts), _stage(r["pred_text"], texts)
        if gold is not None:
            steps[key].append((query, gold, pred))
            group_of[key] = r["split_group_id"]
    acc: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(2))
    for key, its in steps.items():
        for a in range(len(its)):
            for b in range(a + 1, len(its)):
                (qa, ga, pa), (qb, gb, pb) = its[a], its[b]
                if ga == gb or qa == qb:
                    continue
                gold_dir = np.sign(gb - ga) * np.sign(qb - qa)  # +1: the later frame has the later stage
                if gold_dir <= 0:
                    continue  # a key out of order with time (cannot happen within one step): not scored
                if pa is None or pb is None or pa == pb:
                    score = 0.5
                else:
                    score = float(np.sign(pb - pa) == np.sign(gb - ga))
                acc[group_of[key]] += np.array([score, 1.0])
    groups = sorted(acc)
    s = np.array([acc[g] for g in groups]).reshape(len(groups), 2)
    return {"within_step_concordance": _boot(groups, s, _ratio(0, 1), sc), "pairs": int(s[:, 1].sum()) if len(s) else 0}


def _t7(rows: list[dict], sc: dict, success_texts: set[str]) -> dict:
    def contrib(r):
        return _two_rates(
            r["answer_text"] in success_texts, 0.5 if r["pred_text"] is None else float(r["pred_text"] in success_texts)
        )

    g, s = _per_group(rows, contrib, 4)
    return {
        "success_minus_failure": _boot(g, s, _diff_of_rates, sc),
        "success_rate_when_success": _boot(g, s, _ratio(0, 1), sc),
        "success_rate_when_failure": _boot(g, s, _ratio(2, 3), sc),
    }


def _label_texts(cfg: Settings, task: str) -> list[dict]:
    """The family's label texts per source in every variant of its template (a release may use either)."""
    from pipeline.settings.config import read_task
    from pipeline.settings.models import TaskFile

    out = []
    for t in (cfg.tasks.get(task), TaskFile.model_validate(read_task(task, variant="public"))):
        if t and t.labels:
            out.append({s: t.for_source(s).labels or {} for s in t.sources})
    return out


def bias_free(eval_df: pl.DataFrame, items: pl.DataFrame, cfg: Settings) -> dict:
    """The bias-free scores of T5, T7, T8, T9 (the families present in eval), per source and overall."""

    sc = cfg.exports.score
    pred = dict(zip(items["item_id"].to_list(), items["prediction"].to_list()))
    fams = {"T5", "T7", "T8", "T9"} & set(eval_df["task_id"].unique().to_list())
    rows_by: dict[str, list[dict]] = defaultdict(list)
    for r in eval_df.filter(pl.col("task_id").is_in(sorted(fams))).iter_rows(named=True):
        r["pred_text"] = _choice_text(r, pred.get(r["item_id"]))
        rows_by[r["task_id"]].append(r)
    out = {}
    for fam in sorted(rows_by, key=lambda t: int(t[1:])):
        rows = rows_by[fam]
        if fam == "T8":
            fn = _t8
        elif fam == "T9":
            fn = _t9
        elif fam == "T5":
            variants = _label_texts(cfg, "T5")

            def texts(r, variants=variants):
                for v in variants:
                    t = v.get(r["source_slug"]) or {}
                    if r["answer_text"] in t.values():
                        return t
                return {}

            fn = lambda rs, sc, texts=texts: _t5(rs, sc, texts)
        else:
            succ = {v.get(s, {}).get("success") for v in _label_texts(cfg, "T7") for s in v} - {None}
            fn = lambda rs, sc, succ=succ: _t7(rs, sc, succ)
        by_source = defaultdict(list)
        for r in rows:
            by_source[r["source_slug"]].append(r)
        out[fam] = {
            "n": len(rows),
            "all": fn(rows, sc),
            "by_source": {s: {"n": len(rs), **fn(rs, sc)} for s, rs in sorted(by_source.items())},
        }
    return out
