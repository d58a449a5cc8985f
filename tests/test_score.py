"""processbench score: answer parsing, metrics, baselines, bootstrap intervals and the CLI on the demo release."""

from __future__ import annotations

import json
import logging

import polars as pl
import pytest

from assets import cli
from pipeline import score
from pipeline.config import load_config
from pipeline.exports.common import read_tables


@pytest.fixture(scope="module")
def cfg():
    return load_config(scale="demo")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(demo_release, tmp_path, cfg, responses: dict):
    preds = _write(tmp_path / "preds.jsonl", [{"item_id": k, "response": v} for k, v in responses.items()])
    out = tmp_path / "scores"
    assert score.main(["--release", str(demo_release), "--predictions", str(preds), "--out", str(out)], cfg) == 0
    return json.loads((out / "metrics.json").read_text()), out


@pytest.mark.parametrize("response,n,want", [
    ("<ANSWER>B</ANSWER>", 4, "B"),
    ("first <ANSWER>A</ANSWER> then <answer> c </answer>", 4, "C"),   # the last tag wins
    ("B", 4, "B"), ("(b)", 4, "B"), ("D.", 4, "D"),                   # bare-letter fallback
    ("<ANSWER>E</ANSWER>", 4, None),                                  # beyond the options
    ("The answer is B", 4, None), ("", 4, None), (None, 4, None), ("<ANSWER>AB</ANSWER>", 4, None),
])
def test_parse_answer(response, n, want):
    assert score.parse_answer(response, n) == want


def test_bare_fallback_can_be_switched_off():
    assert score.parse_answer("B", 4, bare_fallback=False) is None


def test_hand_computed_small_case(cfg):
    ev = pl.DataFrame({
        "item_id": ["i1", "i2", "i3", "i4"], "task_id": ["T1", "T1", "T2", "T2"], "source": ["X", "X", "Y", "Y"],
        "eval_level": [None, None, None, None], "split_group_id": ["g1", "g2", "g3", "g3"],
        "answer": ["A", "B", "A", "C"], "num_choices": [2, 2, 4, 4]}, schema_overrides={"eval_level": pl.Utf8})
    sft = pl.DataFrame({"task_id": ["T1", "T1", "T1", "T2", "T2"], "answer": ["A", "A", "B", "C", "C"]})
    preds = {"i1": "x <ANSWER>B</ANSWER> y <ANSWER>A</ANSWER>", "i2": "(B)", "i3": "no idea", "zz": "A"}
    m = score.metrics(score.item_table(ev, sft, preds), cfg)
    o = m["overall"]
    assert (o["accuracy"], o["n"], o["invalid_rate"]) == (0.5, 4, 0.5)      # i1, i2 right; i3 unparseable; i4 missing
    assert o["task_macro_accuracy"] == 0.5 and o["source_macro_accuracy"] == 0.5  # T1 1.0, T2 0.0
    assert o["baselines"] == {"random": 0.375,                               # (1/2 + 1/2 + 1/4 + 1/4) / 4
                              "label_prior": 0.5,                            # (2/3 + 1/3 + 0 + 1) / 4
                              "majority": 0.5}                               # T1 -> A, T2 -> C: i1, i4
    assert m["by_task"]["T1"]["accuracy"] == 1.0 and m["by_task"]["T1"]["ci95"] == [1.0, 1.0]
    assert m["by_task"]["T2"]["invalid_rate"] == 1.0
    assert 0.0 <= o["ci95"][0] <= 0.5 <= o["ci95"][1] <= 1.0
    assert m["by_level"]["none"]["n"] == 4


def test_gold_scores_one(demo_release, tmp_path, cfg):
    ev = read_tables(demo_release, cfg)["eval"]
    m, out = _run(demo_release, tmp_path, cfg,
                  {r["item_id"]: f"reasoning...\n{r['sft_target']}" for r in ev.iter_rows(named=True)})
    o = m["overall"]
    assert (o["accuracy"], o["invalid_rate"], o["n"], o["ci95"]) == (1.0, 0.0, ev.height, [1.0, 1.0])
    assert o["task_macro_accuracy"] == 1.0 and o["source_macro_accuracy"] == 1.0
    assert all(b["accuracy"] == 1.0 for b in m["by_task"].values())
    assert set(m["by_task"]) == set(ev["task_id"]) and set(m["by_source"]) == set(ev["source"])
    assert 0 < o["baselines"]["random"] < 1
    assert (out / "metrics.md").read_text().startswith("| slice |")
    assert (out / "accuracy_by_task.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_shuffled_answers(demo_release, tmp_path, cfg):
    ev = read_tables(demo_release, cfg)["eval"]
    wrong = {r["item_id"]: "ABCDEF"[("ABCDEF".index(r["answer"]) + 1) % r["num_choices"]]
             for r in ev.iter_rows(named=True)}
    m, _ = _run(demo_release, tmp_path, cfg, wrong)
    assert m["overall"]["accuracy"] == 0.0 and m["overall"]["invalid_rate"] == 0.0
    # answers shuffled across items: a valid guess per item, accuracy well below 1
    answers = ev["answer"].to_list()
    rolled = answers[1:] + answers[:1]
    (tmp_path / "b").mkdir()
    m2, _ = _run(demo_release, tmp_path / "b", cfg, dict(zip(ev["item_id"].to_list(), rolled)))
    assert m2["overall"]["invalid_rate"] < 0.2 and m2["overall"]["accuracy"] < 0.7


def test_unparseable_is_invalid(demo_release, tmp_path, cfg):
    ev = read_tables(demo_release, cfg)["eval"]
    m, _ = _run(demo_release, tmp_path, cfg, {i: "I am not sure." for i in ev["item_id"]})
    assert m["overall"]["invalid_rate"] == 1.0 and m["overall"]["accuracy"] == 0.0


def test_missing_and_extra_ids_are_reported(demo_release, tmp_path, cfg, caplog):
    ev = read_tables(demo_release, cfg)["eval"]
    ids = ev["item_id"].to_list()
    responses = {i: f"<ANSWER>{a}</ANSWER>" for i, a in zip(ids[2:], ev["answer"].to_list()[2:])}
    responses["pb_v2_eval_999999"] = "A"
    with caplog.at_level(logging.WARNING, logger="pipeline.score"):
        m, _ = _run(demo_release, tmp_path, cfg, responses)
    assert m["predictions"]["missing"] == 2 and m["predictions"]["extra"] == 1
    assert m["predictions"]["extra_examples"] == ["pb_v2_eval_999999"]
    assert m["overall"]["invalid_rate"] == pytest.approx(2 / ev.height, abs=1e-4)
    assert "no prediction" in caplog.text and "name no eval item" in caplog.text


def test_bad_predictions_file_is_a_clear_error(demo_release, tmp_path, cfg, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a", "response": "A"}\nnot json\n')
    rc = score.main(["--release", str(demo_release), "--predictions", str(bad), "--out", str(tmp_path / "o")], cfg)
    assert rc == 2 and "bad.jsonl:2: not JSON" in capsys.readouterr().err
    dup = _write(tmp_path / "dup.jsonl", [{"item_id": "a", "response": "A"}, {"item_id": "a", "response": "B"}])
    with pytest.raises(ValueError, match="predicted twice"):
        score.read_predictions(dup)


def test_cli_score_and_determinism(demo_release, tmp_path):
    cfg = load_config()
    ev = read_tables(demo_release, cfg)["eval"]
    preds = _write(tmp_path / "p.jsonl", [{"item_id": i, "response": "A"} for i in ev["item_id"]])
    outs = []
    for k in range(2):
        out = tmp_path / f"s{k}"
        assert cli.main(["score", "--release", str(demo_release), "--predictions", str(preds), "--out", str(out)]) == 0
        outs.append((out / "metrics.json").read_bytes())
    assert outs[0] == outs[1]
