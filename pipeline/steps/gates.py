"""The blind gates of the step track (validity audit): what predictors that never see an image score on the step
files, and whether the steps of an item show the same frames.

    step_gates(eval_df, sft_df, scfg) -> {"cells": [...], "classes": [...], "frames": [...], ...}
    gate_problems(report, scfg) -> ["source/T13/level: gate macro-F1 exceeds random by more than ..."]

Pooled cells (`cells`): per (source, eval level), every scored eval step; the predictors (pipeline/steps/baselines.py)
are trained on the source's SFT steps: all-correct, coin flip (expected), the error-position prior, an n-gram model
of SFT step chains that flags unlikely steps, and a text-only classifier on the words of the step and its neighbours
and its position.

Per-class cells (`classes`): a perfect detector of a rare class of wrong step (the sources' natural errors are about
one wrong step in nine) moves the pooled figure by a few points only, so each class of wrong step (`natural`: every
natural_* kind; each injected kind) is scored alone against the correct steps: the other wrong steps are left out
of training and scoring (they stay in the chains as neighbours). The predictors are cross-fitted: a source's items
(eval and SFT) are dealt over `classes.folds` folds by split group, each fold predicted by predictors trained on the
others; the cells are each eval level and `all` (every item of the source). Gates: the position prior, the n-gram,
the text classifier and gradient-boosted trees on other features (the words of the step, of two neighbours each side
and of the item's last step, hashed per place; position, distance from the end, step count), a model family the
build never uses to make or thin items.

A cell is checked when it has at least `min_steps` scored steps (per-class cells: and `classes.min_wrong` wrong
steps of its class): every gate's step macro-F1 (pipeline/scoring/steps.py) must stay within `max_over_random`
(`classes.max_over_random`) of `random` (rate_guess: the best a guess that ignores the step reaches, 0.5; the
all-correct and coin-flip figures never pass it, they are reported for reading).

Shared frames (`frames`): per source and class of step (correct, neutral, wrong, natural, each injected kind), the
share of steps that show a frame of the same unit and camera within `frames.near_frames` frames of a frame another
step of the item shows, or an image identical to one another step shows. A class of wrong step with at least
`frames.min_steps` steps must share within `frames.max_gap` of the correct steps' share: else a model that answers
"correct" for an image it has seen before scores without judging anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json

import numpy as np

from pipeline.steps import baselines
from pipeline.steps.metrics import coin_counts, confusion, macro_f1
from pipeline.steps.tables import SCORE_COLUMNS, error_class, step_rows

if TYPE_CHECKING:
    from pipeline.settings.step_gates import ValiditySteps

GATES = ("all_correct", "coin_flip", "position_prior", "ngram", "text_classifier")
CLASS_GATES = ("position_prior", "ngram", "text_classifier", "boosted")
# what the gates read of the step files (read_step_tables columns): the scorer's, plus each step's frames and images
GATE_COLUMNS = SCORE_COLUMNS + ("step_reconstruction_keys_json", "image_hashes_json", "step_image_index_json")
ALL = "all"  # the per-class cell of every item of a source (eval and SFT)


def _predict(sft: list[dict], ev: list[dict], scfg: ValiditySteps) -> dict[str, list[int]]:
    ng, tc = scfg.ngram, scfg.text_classifier
    return {
        "all_correct": baselines.all_correct(ev),
        "position_prior": baselines.position_prior(sft, ev),
        "ngram": baselines.ngram(sft, ev, int(ng.order), float(ng.alpha)),
        "text_classifier": baselines.text_classifier(sft, ev, float(tc.C), int(tc.max_iter)),
    }


def _f1(gold: list[int], pred: list[int]) -> float | None:
    v = float(macro_f1(np.sum([confusion(g, p) for g, p in zip(gold, pred)], axis=0))[0]) if gold else float("nan")
    return None if np.isnan(v) else round(v, 4)


def rate_guess(gold: list[int]) -> float | None:
    """The reference of the gates: the expected step macro-F1 (of expected confusion counts) of a guess that marks a
    step wrong with probability q, the cell's own share of wrong steps, whatever the step: 0.5 whenever the cell has
    both kinds of step, the best any step-independent guess reaches (the coin flip, q = 0.5, scores less: 0.454 at
    q = 0.21, 0.405 at q = 0.10, so a gate measured against it would fail an uninformed guess at the right rate)."""
    if not gold:
        return None
    q = sum(g == -1 for g in gold) / len(gold)
    n1, n0 = sum(g == 1 for g in gold), sum(g == -1 for g in gold)
    return round(float(macro_f1([[n1 * (1 - q), n1 * q, n0 * (1 - q), n0 * q]])[0]), 4)


def step_gates(eval_df, sft_df, scfg: ValiditySteps) -> dict:
    """Per (source, level): scored eval steps, items, and each gate's step macro-F1 (`random`: rate_guess)."""
    ev, sf = step_rows(eval_df), step_rows(sft_df)
    cells = []
    for source in sorted({s["source_slug"] for s in ev}):  # slugs, as the audit's other cells
        e = [s for s in ev if s["source_slug"] == source]
        preds = _predict([s for s in sf if s["source_slug"] == source], e, scfg)
        for level in sorted({s["level"] for s in e}):
            idx = [i for i, s in enumerate(e) if s["level"] == level and s["gold"] in (1, -1)]
            gold = [e[i]["gold"] for i in idx]
            cell = {
                "source": source,
                "level": level,
                "eval_steps": len(idx),
                "eval_items": len({e[i]["item_id"] for i in idx}),
                "wrong_share": round(sum(g == -1 for g in gold) / len(gold), 4) if gold else None,
            }
            coin = macro_f1(np.sum([coin_counts(g) for g in gold], axis=0))[0] if gold else float("nan")
            cell["coin_flip"] = None if np.isnan(coin) else round(float(coin), 4)
            for name, p in preds.items():
                cell[name] = _f1(gold, [p[i] for i in idx])
            cell["random"] = rate_guess(gold)
            cell["checked"] = len(idx) >= int(scfg.min_steps)
            cells.append(cell)
    return {
        "min_steps": int(scfg.min_steps),
        "max_over_random": float(scfg.max_over_random),
        "eval_items": eval_df.height,
        "sft_items": sft_df.height,
        "gates": list(GATES),
        "cells": cells,
        "class_gates": list(CLASS_GATES),
        "classes_limits": scfg.classes.model_dump(),
        "classes": class_gates(ev, sf, scfg),
        "frames_limits": scfg.frames.model_dump(),
        "frames": frame_sharing(eval_df, sft_df, int(scfg.frames.near_frames)),
    }


def _class_view(steps: list[dict], cls: str) -> list[dict]:
    """The steps with every wrong step of another class made unscored (gold 0): out of training and scoring, still
    a neighbour in its chain."""
    return [s if s["gold"] != -1 or error_class(s["kind"]) == cls else {**s, "gold": 0, "kind": None} for s in steps]


def _folds(steps: list[dict], k: int) -> list[np.ndarray]:
    """Step indices of each fold: the split groups dealt over min(k, groups) folds (scikit-learn's GroupKFold,
    deterministic), so an item and its whole group are predicted by predictors that never saw them."""
    from sklearn.model_selection import GroupKFold

    groups = [s["split_group_id"] for s in steps]
    n = min(int(k), len(set(groups)))
    if n < 2:
        return []
    return [test for _, test in GroupKFold(n_splits=n).split(np.zeros(len(steps)), groups=groups)]


def _class_predict(train: list[dict], test: list[dict], scfg: ValiditySteps) -> dict[str, list[int]]:
    ng, tc = scfg.ngram, scfg.text_classifier
    return {
        "position_prior": baselines.position_prior(train, test),
        "ngram": baselines.ngram(train, test, int(ng.order), float(ng.alpha)),
        "text_classifier": baselines.text_classifier(train, test, float(tc.C), int(tc.max_iter)),
        "boosted": baselines.boosted(train, test, scfg.boosted.model_dump()),
    }


def _cell(gold: list[int]) -> dict:
    coin = macro_f1(np.sum([coin_counts(g) for g in gold], axis=0))[0] if gold else float("nan")
    return {
        "steps": len(gold),
        "wrong": sum(g == -1 for g in gold),
        "wrong_share": round(sum(g == -1 for g in gold) / len(gold), 4) if gold else None,
        "random": rate_guess(gold),
        "all_correct": _f1(gold, [1] * len(gold)),
        "coin_flip": None if np.isnan(coin) else round(float(coin), 4),
    }


def class_gates(ev: list[dict], sf: list[dict], scfg: ValiditySteps) -> list[dict]:
    """Per source, class of wrong step and cell (each eval level, then `all`): correct steps against that class
    alone, every gate cross-fitted by split group (module docstring)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # small fits, many of them: a native thread pool per fit only spins on a busy machine
        return _class_gates(ev, sf, scfg)


def _class_gates(ev: list[dict], sf: list[dict], scfg: ValiditySteps) -> list[dict]:
    lim = scfg.classes
    out = []
    for source in sorted({s["source_slug"] for s in ev + sf}):
        steps = [s for s in ev + sf if s["source_slug"] == source]
        levels = sorted({s["level"] for s in ev if s["source_slug"] == source})
        in_eval = [True] * sum(s["source_slug"] == source for s in ev) + [False] * sum(
            s["source_slug"] == source for s in sf
        )
        folds = _folds(steps, int(lim.folds))
        for cls in sorted({error_class(s["kind"]) for s in steps if s["gold"] == -1}):
            view = _class_view(steps, cls)
            fit = sum(s["gold"] == -1 for s in view) >= int(lim.min_wrong) and folds
            preds: dict[str, list] = {g: [None] * len(view) for g in CLASS_GATES}
            for test in folds if fit else []:
                held = set(test.tolist())
                train = [s for i, s in enumerate(view) if i not in held]
                got = _class_predict(train, [view[i] for i in test], scfg)
                for g, p in got.items():
                    for i, v in zip(test, p):
                        preds[g][int(i)] = v
            for level in levels + [ALL]:
                idx = [
                    i
                    for i, s in enumerate(view)
                    if s["gold"] in (1, -1) and (level == ALL or (in_eval[i] and s["level"] == level))
                ]
                gold = [view[i]["gold"] for i in idx]
                if -1 not in gold:
                    continue  # the class has no step in this cell
                cell = {"source": source, "level": level, "class": cls, **_cell(gold)}
                for g in CLASS_GATES:
                    cell[g] = _f1(gold, [preds[g][i] for i in idx]) if fit and gold else None
                cell["checked"] = bool(fit) and len(idx) >= int(scfg.min_steps) and cell["wrong"] >= int(lim.min_wrong)
                out.append(cell)
    return out


def step_class(gold: int, kind: str | None) -> str:
    """correct / neutral / the error class of a step."""
    return {1: "correct", 0: "neutral"}.get(gold) or error_class(kind) or "wrong"


def frame_sharing(eval_df, sft_df, near: int) -> list[dict]:
    """Per source and class of step (step_class, and `wrong` for every wrong step): steps, the steps sharing a frame
    (a frame of the same unit and camera within `near` frames of another step's, or an identical image) and their
    share. Tables without the frame columns: []."""
    cols = ("source_slug", "response", "step_error_kinds_json", "step_reconstruction_keys_json")
    counts: dict[tuple[str, str], list[int]] = {}
    for df in (eval_df, sft_df):
        if not all(c in df.columns for c in cols + ("image_hashes_json", "step_image_index_json")):
            return []
        for r in df.iter_rows(named=True):
            keys = json.loads(r["step_reconstruction_keys_json"])
            hashes = json.loads(r["image_hashes_json"])
            index = json.loads(r["step_image_index_json"])
            kinds = json.loads(r["step_error_kinds_json"])
            gold = r["response"]["process_correctness"]
            shown = [
                ([(k["source_unit_id"], k["camera"], int(f)) for f in k["frame_indices"]], {hashes[j] for j in ix})
                for k, ix in zip(keys, index)
            ]
            for i, (frames, images) in enumerate(shown):
                shared = any(
                    images & other_images
                    or any(u == v and c == d and abs(f - g) <= near for u, c, f in frames for v, d, g in other)
                    for j, (other, other_images) in enumerate(shown)
                    if j != i
                )
                cls = step_class(int(gold[i]), kinds[i])
                for c in [cls] + (["wrong"] if int(gold[i]) == -1 else []):
                    n = counts.setdefault((r["source_slug"], c), [0, 0])
                    n[0] += 1
                    n[1] += int(shared)
    return [
        {"source": s, "class": c, "steps": n, "shared": k, "share": round(k / n, 4) if n else None}
        for (s, c), (n, k) in sorted(counts.items())
    ]


def gate_problems(report: dict, scfg: ValiditySteps) -> list[str]:
    """Every checked cell (pooled and per class) where a gate's macro-F1 exceeds `random` by more than its limit, and
    every class of wrong step whose share of steps sharing a frame departs from the correct steps' by more than
    `frames.max_gap`."""
    out = []
    lim = float(scfg.max_over_random)
    for c in report["cells"]:
        if not c["checked"] or c["random"] is None:
            continue
        for g in GATES:
            if c[g] is not None and c[g] - c["random"] > lim + 1e-9:
                out.append(
                    f"{c['source']}/T13/{c['level']}: blind step gate {g} macro-F1 {c[g]:.3f} exceeds "
                    f"random {c['random']:.3f} by more than {lim:.2f}"
                )
    lim = float(scfg.classes.max_over_random)
    for c in report.get("classes", []):
        if not c["checked"] or c["random"] is None:
            continue
        for g in CLASS_GATES:
            if c[g] is not None and c[g] - c["random"] > lim + 1e-9:
                out.append(
                    f"{c['source']}/T13/{c['level']}: blind step gate {g} tells {c['class']} wrong steps from correct "
                    f"ones: macro-F1 {c[g]:.3f} exceeds random {c['random']:.3f} by more than {lim:.2f}"
                )
    fl = scfg.frames
    shares = {(c["source"], c["class"]): c for c in report.get("frames", [])}
    for (source, cls), c in sorted(shares.items()):
        ok = shares.get((source, "correct"))
        if cls in ("correct", "neutral") or ok is None or c["steps"] < int(fl.min_steps):
            continue
        if abs(c["share"] - ok["share"]) > float(fl.max_gap) + 1e-9:
            out.append(
                f"{source}/T13: {c['share']:.1%} of {cls} steps share a frame with another step of their item against "
                f"{ok['share']:.1%} of correct steps (at most {float(fl.max_gap):.0%} apart)"
            )
    return out


def _f3(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def pooled_table(report: dict) -> list[str]:
    f = _f3
    lines = [
        "| source | level | steps | items | wrong share | random | coin flip | all-correct | position prior "
        "| n-gram | text classifier | checked |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in report["cells"]:
        lines.append(
            f"| {c['source']} | {c['level']} | {c['eval_steps']} | {c['eval_items']} | {f(c['wrong_share'])} "
            f"| {f(c['random'])} | {f(c['coin_flip'])} | {f(c['all_correct'])} | {f(c['position_prior'])} | {f(c['ngram'])} "
            f"| {f(c['text_classifier'])} | {'yes' if c['checked'] else 'no'} |"
        )
    return lines


def class_table(report: dict) -> list[str]:
    f = _f3
    lines = [
        "| source | level | class | steps | wrong | random | position prior | n-gram | text classifier | boosted trees "
        "| checked |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in report["classes"]:
        lines.append(
            f"| {c['source']} | {c['level']} | {c['class']} | {c['steps']} | {c['wrong']} | {f(c['random'])} "
            f"| {f(c['position_prior'])} | {f(c['ngram'])} | {f(c['text_classifier'])} | {f(c['boosted'])} "
            f"| {'yes' if c['checked'] else 'no'} |"
        )
    return lines


def frames_table(report: dict) -> list[str]:
    lines = ["| source | class | steps | sharing a frame | share |", "|---|---|---:|---:|---:|"]
    for c in report["frames"]:
        lines.append(f"| {c['source']} | {c['class']} | {c['steps']} | {c['shared']} | {c['share']:.1%} |")
    return lines


def gate_markdown(report: dict) -> list[str]:
    """The validity report's step section."""
    lines = [
        "",
        "## Step track (T13): blind gates",
        "",
        "Step macro-F1 on the step eval files of predictors that never see an image, trained on the source's SFT",
        "steps (pipeline/steps/gates.py): all-correct, coin flip (expected), error-position prior, an n-gram",
        "model of step chains, a text-only classifier on step sentences, their neighbours and positions. random = a",
        "guess at the cell's own wrong-step rate (0.5: the best a guess that ignores the step reaches). Checked cells",
        f"(at least {report['min_steps']} scored steps) must keep every gate within "
        f"{report['max_over_random']:.2f} of random.",
        "",
        *pooled_table(report),
    ]
    if report.get("classes") is not None and "classes_limits" in report:
        lim = report["classes_limits"]
        lines += [
            "",
            "Per class of wrong step (`natural`: the sources' own failure records; each injected kind): correct steps "
            "against that class alone, the other wrong steps left out, predictors (and gradient-boosted trees on "
            f"the words of the step and two neighbours each side) cross-fitted over {lim['folds']} folds of split groups; "
            f"cells: each eval level and `all` (every item of the source). Checked cells (at least "
            f"{report['min_steps']} scored steps and {lim['min_wrong']} of the class) keep every gate within "
            f"{lim['max_over_random']:.2f} of random.",
            "",
            *class_table(report),
        ]
    if report.get("frames"):
        fl = report["frames_limits"]
        lines += [
            "",
            f"Steps showing a frame that another step of their item shows (same unit and camera, at most "
            f"{fl['near_frames']} frames apart, or an identical image), every item of the source; a class of wrong "
            f"step with at least {fl['min_steps']} steps must stay within {fl['max_gap']:.0%} of the correct steps:",
            "",
            *frames_table(report),
        ]
    return lines
