"""Bias-free scores (pipeline/scoring/bias.py) on hand-made eval tables: every answer habit scores 0 (T9, T7, T8 tau)
or 0.5 (concordances), a model that follows the images scores 1, and the intervals resample split groups."""

from __future__ import annotations

import itertools
import json

import polars as pl
import pytest

from pipeline.settings.config import load_settings
from pipeline.scoring.bias import bias_free

CFG = load_settings()
PERMS = ["".join(p) for p in itertools.permutations("XYZ")]
T5 = CFG.tasks["T5"].labels["default"]
T7 = CFG.tasks["T7"].labels["rh20t"]


def _row(i, task, answer_text, choices, group, **kw):
    r = {
        "item_id": f"{task}_{i:04d}",
        "task_id": task,
        "source_slug": kw.pop("source", "gm100"),
        "source_unit_id": kw.pop("unit", f"u{group}"),
        "split_group_id": f"g{group}",
        "answer_text": answer_text,
        "display_labels_json": kw.pop("labels", None),
        "frame_indices_json": json.dumps(kw.pop("frames", [0])),
        "render_spec_json": kw.pop("spec", None),
    }
    for k, c in enumerate("ABCDEF"):
        r[f"choice_{c}"] = choices[k] if k < len(choices) else None
    r["answer"] = "ABCDEF"[choices.index(answer_text)]
    return r


def _score(rows, pick):
    """pick(row) -> the answer text the model gives (None = unparseable)."""
    ev = pl.DataFrame(rows)
    pred = []
    for r in rows:
        t = pick(r)
        pred.append(None if t is None else "ABCDEF"[[r[f"choice_{c}"] for c in "ABCDEF"].index(t)])
    return bias_free(ev, pl.DataFrame({"item_id": [r["item_id"] for r in rows], "prediction": pred}), CFG)


def _t9_rows():
    return [_row(i, "T9", "XY"[i % 2], ["X", "Y"], i // 4, labels='["X","Y"]') for i in range(80)]


def test_t9_left_habit_removed():
    rows = _t9_rows()
    left = _score(rows, lambda r: "X")["T9"]["all"]
    assert left["left_habit_free"]["value"] == 0.0 and left["left_rate_when_left_earlier"]["value"] == 1.0
    right = _score(rows, lambda r: r["answer_text"])["T9"]["all"]["left_habit_free"]
    assert right["value"] == 1.0 and right["groups"] == 20
    # every resample agrees: no interval, with the reason, never a zero-width [1.0, 1.0]
    assert right["ci95"] is None and "every resample" in right["ci95_note"]
    wrong = _score(rows, lambda r: "Y" if r["answer_text"] == "X" else "X")["T9"]["all"]["left_habit_free"]
    assert wrong["value"] == -1.0
    none = _score(rows, lambda r: None)["T9"]["all"]["left_habit_free"]
    assert none["value"] == 0.0  # unparseable: a coin flip


def test_t8_tau_and_display_order():
    rows = [_row(i, "T8", PERMS[i % 6], PERMS, i // 6, labels='["X","Y","Z"]') for i in range(120)]
    shown = _score(rows, lambda r: "XYZ")["T8"]["all"]
    assert shown["display_order_rate"]["value"] == 1.0 and shown["gold_display_rate"]["value"] == pytest.approx(
        1 / 6, abs=1e-4
    )
    assert shown["kendall_tau"]["value"] == 0.0 and shown["pairwise_concordance"]["value"] == 0.5
    right = _score(rows, lambda r: r["answer_text"])["T8"]["all"]
    assert right["kendall_tau"]["value"] == 1.0 and right["pairwise_concordance"]["value"] == 1.0
    rev = _score(rows, lambda r: r["answer_text"][::-1])["T8"]["all"]
    assert rev["kendall_tau"]["value"] == -1.0
    lo, hi = _score(rows, lambda r: r["answer_text"] if r["item_id"] < "T8_0060" else "XYZ")["T8"]["all"][
        "kendall_tau"
    ]["ci95"]
    assert lo < 0.5 < hi  # half right: the interval over 20 groups brackets the value


def test_t5_within_step_concordance():
    rows, i = [], 0
    for step in range(12):
        strip = [100 * step + k * 10 for k in range(5)]
        for q, stage in ((strip[0] + 3, "early"), (strip[2] + 3, "middle"), (strip[4] - 3, "late")):
            rows.append(
                _row(
                    i,
                    "T5",
                    T5[stage],
                    list(T5.values()),
                    step // 3,
                    unit=f"u{step // 3}",
                    frames=strip + [q],
                    spec=json.dumps({"labels": ["1", "2", "3", "4", "5", "NOW"]}),
                )
            )
            i += 1
    assert _score(rows, lambda r: T5["middle"])["T5"]["all"]["within_step_concordance"]["value"] == 0.5
    right = _score(rows, lambda r: r["answer_text"])["T5"]
    assert right["all"]["within_step_concordance"]["value"] == 1.0 and right["all"]["pairs"] == 36
    inv = {T5["early"]: T5["late"], T5["late"]: T5["early"], T5["middle"]: T5["middle"]}
    assert _score(rows, lambda r: inv[r["answer_text"]])["T5"]["all"]["within_step_concordance"]["value"] == 0.0


def test_t7_success_minus_failure_and_sources():
    rows = [
        _row(
            i,
            "T7",
            T7["success" if i % 2 else "failure"],
            list(T7.values()),
            i // 4,
            source="rh20t" if i < 40 else "reassemble",
        )
        for i in range(80)
    ]
    rows = [
        r
        if r["source_slug"] == "rh20t"
        else {
            **r,
            **{f"choice_{c}": v for c, v in zip("AB", CFG.tasks["T7"].labels["reassemble"].values())},
            "answer_text": CFG.tasks["T7"].labels["reassemble"]["success" if int(r["item_id"][-4:]) % 2 else "failure"],
        }
        for r in rows
    ]
    succ = {T7["success"], CFG.tasks["T7"].labels["reassemble"]["success"]}
    always = _score(rows, lambda r: next(t for t in (r["choice_A"], r["choice_B"]) if t in succ))["T7"]
    assert always["all"]["success_minus_failure"]["value"] == 0.0
    right = _score(rows, lambda r: r["answer_text"])["T7"]
    assert right["all"]["success_minus_failure"]["value"] == 1.0
    assert set(right["by_source"]) == {"reassemble", "rh20t"} and right["by_source"]["rh20t"]["n"] == 40
