"""The T13 step scorer (pipeline/scoring/steps.py) and `processbench score --step-predictions`: each metric on a
hand-computed case, gold predictions at macro-F1 1.0, all-correct predictions at exactly the all-correct baseline,
intervals by split group, the CLI beside the multiple-choice scores, and a release without step files."""

from __future__ import annotations

import json

import polars as pl
import pytest

from factories import build, make_cfg, make_step_row, step_table, synthetic_step_rows, write_step_files
from pipeline.scoring import mcq as score
from pipeline.settings.config import load_settings
from pipeline.settings.models import ExportsScore
from pipeline.steps import baselines
from pipeline.scoring.steps import first_error_score, score_table, step_metrics
from pipeline.steps.metrics import macro_f1
from pipeline.steps.tables import step_rows

SC = ExportsScore(bootstrap_samples=200, seed=7, ci=0.95, min_ci_groups=5)


def _hand():
    """Five items in five split groups; predictions chosen so every count below is known."""
    rows = [
        make_step_row(1, [1, -1, 1], kinds=[None, "natural_action_failure", None]),
        make_step_row(2, [1, 1, 0]),
        make_step_row(3, [-1, 1], kinds=["swapped_frames", None]),
        make_step_row(4, [1, 1]),
        make_step_row(5, [1, -1], kinds=[None, "swapped_frames"]),
    ]
    ids = [r["item_id"] for r in rows]
    preds = {
        ids[0]: [1, -1, 1],  # perfect
        ids[1]: "<STEPS>+,-,-</STEPS>",  # one false alarm, the neutral step's verdict ignored
        ids[2]: "no tag at all",  # invalid: every scored step wrong
        ids[3]: [1, 1],  # perfect, clean
        ids[4]: "<STEPS>-,-</STEPS>",
    }  # finds the error, but flags an earlier step first
    return step_table(rows), preds


def test_metrics_on_a_hand_computed_case():
    ev, preds = _hand()
    steps, items = score_table(ev, ev.clear(), preds)
    o = step_metrics(steps, items, SC)["overall"]
    # confusion: gold+/pred+ 5, gold+/pred- 3, gold-/pred+ 1, gold-/pred- 2
    assert (o["n_items"], o["n_steps"], o["invalid_rate"]) == (5, 11, 0.2)
    assert o["macro_f1"] == round((10 / 14 + 4 / 8) / 2, 4) == 0.6071
    # first error: error items hit 1 of 3 (items 1; 3 invalid, 5 early), clean items 1 of 2 (item 2 flags step 1)
    assert o["first_error_parts"] == {
        "error_items": 3,
        "error_accuracy": round(1 / 3, 4),
        "clean_items": 2,
        "clean_accuracy": 0.5,
    }
    assert o["first_error"] == 0.4
    bl = o["baselines"]
    assert bl["all_correct"] == {"macro_f1": round((16 / 19 + 0) / 2, 4), "first_error": 0.0}
    assert bl["coin_flip"]["macro_f1"] == round((8 / 13.5 + 3 / 8.5) / 2, 4)
    # coin first error: error items 0.25, 0.5, 0.25 -> 1/3; clean items 0.25, 0.25
    assert bl["coin_flip"]["first_error"] == round(2 * (1 / 3) * 0.25 / (1 / 3 + 0.25), 4) == 0.2857
    assert {k: (v["n"], v["recall"]) for k, v in o["by_kind"].items()} == {
        "natural_action_failure": (1, 1.0),
        "swapped_frames": (2, 0.5),
    }
    assert {k: v["recall"] for k, v in o["by_kind_class"].items()} == {"injected": 0.5, "natural": 1.0}


def test_metric_formulas_edge_cases():
    assert macro_f1([[3, 0, 0, 0]])[0] == 1.0  # no incorrect steps at all: that class is left out
    assert macro_f1([[3, 0, 1, 0]])[0] == pytest.approx((6 / 7 + 0) / 2)
    assert first_error_score([[1, 2, 0, 0]]).tolist() == [pytest.approx(float("nan"), nan_ok=True)]
    assert first_error_score([[0, 2, 0, 3]])[0] == 0.0
    assert first_error_score([[2, 2, 3, 3]])[0] == 1.0


def _synthetic(n=120, seed=3):
    rows = synthetic_step_rows(
        n, seed=seed, levels=("L1", "L2"), sources=(("REASSEMBLE", "reassemble"), ("RH20T", "rh20t"))
    )
    return step_table(rows), rows


def test_gold_scores_one_and_all_correct_scores_the_all_correct_baseline():
    ev, rows = _synthetic()
    sft = step_table(synthetic_step_rows(200, split="sft", seed=9, start=1000))
    gold = {r["item_id"]: r["answer"] for r in rows}
    m = step_metrics(*score_table(ev, sft, gold), SC)
    assert m["overall"]["macro_f1"] == 1.0 and m["overall"]["first_error"] == 1.0
    assert all(c["macro_f1"] == 1.0 for c in m["cells"])
    ones = {r["item_id"]: [1] * r["num_steps"] for r in rows}
    m = step_metrics(*score_table(ev, sft, ones), SC)
    for b in [m["overall"], *m["by_source"].values(), *m["by_level"].values(), *m["cells"]]:
        assert b["macro_f1"] == b["baselines"]["all_correct"]["macro_f1"]
        assert b["first_error"] == b["baselines"]["all_correct"]["first_error"]
    assert len(m["cells"]) == 4 and m["overall"]["macro_f1_ci95"] is not None


def test_intervals_resample_split_groups_and_need_enough_of_them():
    ev, rows = _synthetic(40)
    half = {r["item_id"]: ([1] * r["num_steps"] if i % 2 else r["answer"]) for i, r in enumerate(rows)}
    o = step_metrics(*score_table(ev, ev.clear(), half), SC)["overall"]
    lo, hi = o["macro_f1_ci95"]
    assert lo <= o["macro_f1"] <= hi and lo < hi
    one_group = step_table([{**r, "split_group_id": "g"} for r in rows])
    o = step_metrics(*score_table(one_group, ev.clear(), half), SC)["overall"]
    assert o["macro_f1_ci95"] is None and "split group(s) < score.min_ci_groups" in o["macro_f1_ci95_note"]


def test_position_prior_follows_the_sft_error_positions():
    sft = [make_step_row(i, [1, 1, -1], split="sft") for i in range(3)] + [make_step_row(9, [1, -1, 1], split="sft")]
    ev = [make_step_row(20, [1, 1, 1]), make_step_row(21, [1, 1, 1, 1])]
    pred = baselines.position_prior(step_rows(step_table(sft)), step_rows(step_table(ev)))
    # (source, 3, 2): 3/4 wrong > the source's 4/12; n = 4 is unseen: (source, position) decides, position 3 unseen
    assert pred == [1, 1, -1, 1, 1, -1, 1]


def test_ngram_flags_a_step_unlikely_after_its_chain():
    a, b, c, done = "approach", "grasp", "lift", "The task is complete."
    sft = [make_step_row(i, [1, 1, 1], split="sft", steps=[a, b, c]) for i in range(6)] + [
        make_step_row(10 + i, [1, 1, -1], split="sft", steps=[a, b, done]) for i in range(3)
    ]
    ev = [make_step_row(30, [1, 1, -1], steps=[a, b, done]), make_step_row(31, [1, 1, 1], steps=[a, b, c])]
    assert baselines.ngram(step_rows(step_table(sft)), step_rows(step_table(ev))) == [1, 1, -1, 1, 1, 1]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_cli_reports_steps_beside_the_mcq_scores(tmp_path):
    cfg = make_cfg()
    rel = tmp_path / "rel"
    build(rel, cfg)
    ev, rows = _synthetic(30)
    write_step_files(rel, cfg, rows, synthetic_step_rows(60, split="sft", seed=5, start=500))
    mcq = pl.read_parquet(rel / cfg.release.files.eval_parquet)
    preds = _write(tmp_path / "p.jsonl", [{"item_id": i, "response": "<ANSWER>A</ANSWER>"} for i in mcq["item_id"]])
    steps = _write(
        tmp_path / "s.jsonl",
        [{"item_id": r["item_id"], "prediction": r["answer"]} for r in rows[:-1]]
        + [{"item_id": "nope", "prediction": [1]}],
    )
    out = tmp_path / "out"
    assert (
        score.main(
            ["--release", str(rel), "--predictions", str(preds), "--step-predictions", str(steps), "--out", str(out)],
            load_settings(),
        )
        == 0
    )
    m = json.loads((out / "metrics.json").read_text())
    assert "overall" in m and m["steps"]["predictions"]["missing"] == 1 and m["steps"]["predictions"]["extra"] == 1
    assert m["steps"]["overall"]["invalid_rate"] == round(1 / 30, 4)
    assert set(m["steps"]["by_level"]) == {"L1", "L2"}
    md = (out / "metrics.md").read_text()
    assert "| overall (micro) " in md and "## Step track (T13)" in md and "first-error" in md
    assert len((out / "per_step.jsonl").read_text().splitlines()) == sum(
        sum(1 for g in r["response"]["process_correctness"] if g) for r in rows
    )
    # steps alone; a level selection reaches the step files too
    only = tmp_path / "only"
    assert (
        score.main(
            ["--release", str(rel), "--step-predictions", str(steps), "--out", str(only), "--levels", "L2"],
            load_settings(),
        )
        == 0
    )
    m = json.loads((only / "metrics.json").read_text())
    assert set(m) == {"steps", "release"} and set(m["steps"]["by_level"]) == {"L2"}
    assert not (only / "per_item.jsonl").exists()


def test_a_release_without_step_files_has_no_step_track(tmp_path):
    cfg = make_cfg()
    rel = tmp_path / "rel"
    build(rel, cfg)
    mcq = pl.read_parquet(rel / cfg.release.files.eval_parquet)
    preds = _write(tmp_path / "p.jsonl", [{"item_id": i, "response": "A"} for i in mcq["item_id"]])
    assert (
        score.main(["--release", str(rel), "--predictions", str(preds), "--out", str(tmp_path / "o")], load_settings())
        == 0
    )
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert "steps" not in m and "Step track" not in (tmp_path / "o" / "metrics.md").read_text()
    steps = _write(tmp_path / "s.jsonl", [{"item_id": "x", "prediction": [1]}])
    assert (
        score.main(
            ["--release", str(rel), "--step-predictions", str(steps), "--out", str(tmp_path / "o2")], load_settings()
        )
        == 2
    )  # a clear error: the release has no step files


def test_step_files_are_named_by_the_release_config(tmp_path):
    from pipeline.release.files import step_files

    cfg = load_settings()
    files = cfg.release.files.model_dump()
    assert files["steps_eval_parquet"] == "splits/processbench_steps_eval.parquet"
    assert files["steps_sft_parquet"] == "splits/processdata_steps_sft.parquet"
    names = step_files(cfg)  # the one place the writer and the readers take the names from
    assert names == {
        "L1": ("splits/processbench_steps_eval.parquet", "splits/processbench_steps_eval.jsonl"),
        "L2": ("splits/processbench_steps_eval_L2.parquet", "splits/processbench_steps_eval_L2.jsonl"),
        "L3": ("splits/processbench_steps_eval_L3.parquet", "splits/processbench_steps_eval_L3.jsonl"),
        "sft": ("splits/processdata_steps_sft.parquet", "splits/processdata_steps_sft.jsonl"),
    }
    # in a written release: only the parts that are there, none without the main eval file
    assert step_files(cfg, tmp_path) == {}
    write_step_files(tmp_path, cfg, synthetic_step_rows(20, seed=1, levels=("L2",)), [])
    assert step_files(cfg, tmp_path) == {}
    write_step_files(tmp_path, cfg, synthetic_step_rows(20, seed=1, levels=("L1",)), [])
    assert step_files(cfg, tmp_path) == {k: names[k] for k in ("L1", "L2", "sft")}
    # the writer puts every row in a file of its level, L1 always, and refuses a level without a step file
    from pipeline.steps.write import _file_tables

    rows = pl.DataFrame(
        {"item_id": ["a", "b", "c"], "split": ["eval", "eval", "sft"], "eval_level": [None, "L3", None]}
    )
    assert {pq: df["item_id"].to_list() for pq, (_, df) in _file_tables(rows, cfg).items()} == {
        names["L1"][0]: ["a"],
        names["L3"][0]: ["b"],
        names["sft"][0]: ["c"],
    }
    with pytest.raises(ValueError, match="L4"):
        _file_tables(rows.with_columns(pl.lit("L4").alias("eval_level")), cfg)


def test_step_metric_definitions_are_the_documented_ones():
    """The docs' step scoring section states each metric by the formula the scorer writes into metrics.json."""
    from pathlib import Path

    from pipeline.scoring.steps import STEP_METRIC_DEFINITIONS

    doc = (Path(__file__).resolve().parent.parent / "docs" / "release-format.md").read_text(encoding="utf-8")
    for name, text in STEP_METRIC_DEFINITIONS.items():
        assert f"  - **{name}**: {text}\n" in doc, name
