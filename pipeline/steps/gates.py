"""The blind gates of the step track (validity audit): what predictors that never see an image score on the step
eval files, per (source, eval level) cell, against random (a guess at the cell's wrong-step rate).

    step_gates(eval_df, sft_df, scfg) -> {"cells": [...], ...}   scfg = configs/validity.yaml `steps`
    gate_problems(report, scfg) -> ["source/level: gate macro-F1 exceeds random by more than ..."]

Gates (pipeline/steps/baselines.py, trained on the source's SFT steps): all-correct, coin flip (expected), the
error-position prior, an n-gram model of SFT step chains that flags unlikely steps, and a text-only classifier on the
step sentences and positions. A cell with at least `min_steps` scored eval steps is checked: every gate's step
macro-F1 (pipeline/steps/score.py) must stay within `max_over_random` of `random` (rate_guess: the best a guess that
ignores the step reaches, 0.5; the all-correct and coin-flip gates never pass it, they are reported for reading).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipeline.steps import baselines
from pipeline.steps.score import coin_counts, confusion, macro_f1
from pipeline.steps.tables import step_rows

if TYPE_CHECKING:
    from pipeline.settings.step_gates import ValiditySteps

GATES = ("all_correct", "coin_flip", "position_prior", "ngram", "text_classifier")


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
    }


def gate_problems(report: dict, scfg: ValiditySteps) -> list[str]:
    """Every checked cell where a gate's macro-F1 exceeds `random` by more than `max_over_random`."""
    lim = float(scfg.max_over_random)
    out = []
    for c in report["cells"]:
        if not c["checked"] or c["random"] is None:
            continue
        for g in GATES:
            if c[g] is not None and c[g] - c["random"] > lim + 1e-9:
                out.append(
                    f"{c['source']}/T13/{c['level']}: blind step gate {g} macro-F1 {c[g]:.3f} exceeds "
                    f"random {c['random']:.3f} by more than {lim:.2f}"
                )
    return out


def gate_markdown(report: dict) -> list[str]:
    """The validity report's step section."""
    lines = [
        "",
        "## Step track (T13): blind gates",
        "",
        "Step macro-F1 on the step eval files of predictors that never see an image, trained on the source's SFT",
        "steps (pipeline/steps/gates.py): all-correct, coin flip (expected), error-position prior, an n-gram",
        "model of step chains, a text-only classifier on step sentences and positions. random = a guess at the",
        "cell's own wrong-step rate (0.5: the best a guess that ignores the step reaches). Checked cells",
        f"(at least {report['min_steps']} scored steps) must keep every gate within "
        f"{report['max_over_random']:.2f} of random.",
        "",
        "| source | level | steps | items | wrong share | random | coin flip | all-correct | position prior "
        "| n-gram | text classifier | checked |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def f(x):
        return "–" if x is None else f"{x:.3f}"

    for c in report["cells"]:
        lines.append(
            f"| {c['source']} | {c['level']} | {c['eval_steps']} | {c['eval_items']} | {f(c['wrong_share'])} "
            f"| {f(c['random'])} | {f(c['coin_flip'])} | {f(c['all_correct'])} | {f(c['position_prior'])} | {f(c['ngram'])} "
            f"| {f(c['text_classifier'])} | {'yes' if c['checked'] else 'no'} |"
        )
    return lines
