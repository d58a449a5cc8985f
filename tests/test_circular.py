"""pipeline/scoring/circular.py: rotated copies, circular accuracy and position consistency, and `score --circular`."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline.scoring import circular as C


def _eval():
    return pl.DataFrame(
        {
            "item_id": ["i1", "i2", "i3"],
            "task_id": ["T1", "T2", "T8"],
            "eval_level": ["L1", "L2", "L2"],
            "num_choices": [3, 2, 4],
            "choice_A": ["a", "yes", "XYZ"],
            "choice_B": ["b", "no", "XZY"],
            "choice_C": ["c", None, "YXZ"],
            "choice_D": [None, None, "ZYX"],
            "choice_E": [None] * 3,
            "choice_F": [None] * 3,
            "answer": ["B", "A", "D"],
        }
    )


def test_rotate_moves_the_answer_with_its_option():
    assert C.rotate(["a", "b", "c"], "B", 0) == (["a", "b", "c"], "B")
    assert C.rotate(["a", "b", "c"], "B", 1) == (["b", "c", "a"], "A")
    assert C.rotate(["a", "b", "c"], "B", 2) == (["c", "a", "b"], "C")
    with pytest.raises(ValueError):
        C.rotate(["a", "b"], "A", 2)


def test_circular_rows_one_copy_per_rotation():
    rows = C.circular_rows(_eval())
    assert rows.height == 3 + 2 + 4
    assert rows["copy_id"].to_list()[:3] == ["i1.c0", "i1.c1", "i1.c2"]
    for r in rows.iter_rows(named=True):  # the gold option text is the item's in every copy
        gold = {"i1": "b", "i2": "yes", "i3": "ZYX"}[r["item_id"]]
        assert r[f"choice_{r['answer']}"] == gold
    assert sorted(rows.filter(pl.col("item_id") == "i3")["answer"].to_list()) == ["A", "B", "C", "D"]


def _answer(rows, pick):
    """Predictions for every copy: pick(row) -> letter."""
    return {r["copy_id"]: f"<ANSWER>{pick(r)}</ANSWER>" for r in rows.iter_rows(named=True)}


def test_scores_tell_skill_from_position_habit():
    ev = _eval()
    rows = C.circular_rows(ev)
    gold = C.circular_scores(ev, _answer(rows, lambda r: r["answer"]))
    assert (gold["accuracy"], gold["circular_accuracy"], gold["position_consistency"]) == (1.0, 1.0, 1.0)
    assert gold["by_level"]["L2"]["n"] == 2 and gold["missing_copies"] == 0

    always_a = C.circular_scores(ev, _answer(rows, lambda r: "A"))  # a position habit: right on some copy-0s
    assert always_a["accuracy"] == pytest.approx(1 / 3, abs=1e-4)  # i2's answer is A in copy 0
    assert always_a["circular_accuracy"] == 0.0 and always_a["position_consistency"] == 0.0

    def same_text(r):  # always the same wrong option text, wherever it stands
        wrong = {"i1": "a", "i2": "no", "i3": "XYZ"}[r["item_id"]]
        return next(c for c in "ABCD" if r[f"choice_{c}"] == wrong)

    content = C.circular_scores(ev, _answer(rows, same_text))
    assert content["circular_accuracy"] == 0.0 and content["position_consistency"] == 1.0

    one_copy_missing = _answer(rows, lambda r: r["answer"])
    del one_copy_missing["i3.c2"]
    partial = C.circular_scores(ev, {**one_copy_missing, "nope.c0": "A"})
    assert partial["accuracy"] == 1.0 and partial["circular_accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    assert partial["missing_copies"] == 1 and partial["extra_predictions"] == 1


def test_score_circular_on_the_demo_release(demo_release, tmp_path, capsys):
    """`processbench score --circular`: answering every row of the exported circular TSV right gives 1.0 in every
    level; the report says where it went."""
    import csv

    from assets.cli import main
    from pipeline.settings.config import load_settings
    from pipeline.exports.common import export_files

    tsv = demo_release / export_files(load_settings(scale="demo"))["vlmevalkit_circular"]
    with open(tsv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(
            json.dumps(
                {
                    "item_id": C.copy_id(r["item_id"], int(r["index"]) // C.INDEX_STRIDE),
                    "response": f"<ANSWER>{r['answer']}</ANSWER>",
                }
            )
            + "\n"
            for r in rows
        )
    )
    out = tmp_path / "scores"
    assert (
        main(["score", "--release", str(demo_release), "--predictions", str(preds), "--out", str(out), "--circular"])
        == 0
    )
    report = json.loads((out / "circular.json").read_text())
    assert report["copies"] == len(rows) and report["missing_copies"] == 0
    assert set(report["by_level"]) == {"L1", "L2", "L3"}
    assert {s["circular_accuracy"] for s in report["by_level"].values()} == {1.0}
    assert str((out / "circular.json").resolve()) in capsys.readouterr().out
