"""processbench score: answer parsing, metrics, baselines, bootstrap intervals and the CLI on the demo release."""

from __future__ import annotations

import json
import logging

import polars as pl
import pytest

from assets import cli
from pipeline.scoring import mcq as score
from pipeline.settings.config import load_settings


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(demo_release, tmp_path, cfg, responses: dict):
    preds = _write(tmp_path / "preds.jsonl", [{"item_id": k, "response": v} for k, v in responses.items()])
    out = tmp_path / "scores"
    assert score.main(["--release", str(demo_release), "--predictions", str(preds), "--out", str(out)], cfg) == 0
    return json.loads((out / "metrics.json").read_text()), out


@pytest.mark.parametrize(
    "response,n,want",
    [
        ("<ANSWER>B</ANSWER>", 4, "B"),
        ("first <ANSWER>A</ANSWER> then <answer> c </answer>", 4, "C"),  # the last tag wins
        ("B", 4, "B"),
        ("(b)", 4, "B"),
        ("D.", 4, "D"),  # bare-letter fallback
        ("<ANSWER>E</ANSWER>", 4, None),  # beyond the options
        ("The answer is B", 4, None),
        ("", 4, None),
        (None, 4, None),
        ("<ANSWER>AB</ANSWER>", 4, None),
    ],
)
def test_parse_answer(response, n, want):
    assert score.parse_answer(response, n) == want


def test_bare_fallback_can_be_switched_off():
    assert score.parse_answer("B", 4, bare_fallback=False) is None


def _rows(spec):
    """Eval rows from (item, task, source, level, group, answer letter, options) tuples."""
    rows = []
    for item, task, src, level, group, ans, opts in spec:
        r = {
            "item_id": item,
            "task_id": task,
            "source": src,
            "eval_level": level,
            "split_group_id": group,
            "answer": ans,
            "answer_text": opts["ABCDEF".index(ans)],
            "num_choices": len(opts),
        }
        r.update({f"choice_{c}": (opts[k] if k < len(opts) else None) for k, c in enumerate("ABCDEF")})
        rows.append(r)
    return pl.DataFrame(rows, schema_overrides={"eval_level": pl.Utf8})


def test_hand_computed_small_case(cfg):
    ev = _rows(
        [
            ("i1", "T1", "X", None, "g1", "A", ["ok", "fail"]),
            ("i2", "T1", "X", None, "g2", "B", ["ok", "fail"]),
            ("i3", "T2", "Y", None, "g3", "A", ["a", "b", "c", "d"]),
            ("i4", "T2", "Y", None, "g3", "C", ["a", "b", "c", "d"]),
        ]
    )
    sft = pl.DataFrame(
        {
            "source": ["X", "X", "X", "Y", "Y"],
            "task_id": ["T1", "T1", "T1", "T2", "T2"],
            "answer_text": ["fail", "fail", "ok", "c", "c"],
        }
    )
    preds = {"i1": "x <ANSWER>B</ANSWER> y <ANSWER>A</ANSWER>", "i2": "(B)", "i3": "no idea", "zz": "A"}
    m = score.metrics(score.item_table(ev, sft, preds), cfg)
    o = m["overall"]
    assert (o["accuracy"], o["n"], o["invalid_rate"]) == (0.5, 4, 0.5)  # i1, i2 right; i3 unparseable; i4 missing
    assert o["task_macro_accuracy"] == 0.5 and o["source_macro_accuracy"] == 0.5  # T1 1.0, T2 0.0
    assert o["baselines"] == {
        "random": 0.375,  # (1/2 + 1/2 + 1/4 + 1/4) / 4
        "label_prior": 0.5,  # T1 -> "fail" (i2), T2 -> "c" (i4)
        "majority": 0.5,  # ties -> the first text: "fail" (i2),
        "image_free_best": 0.5,
    }  #   "a" (i3)
    t1 = next(c for c in m["cells"] if c["family"] == "T1")
    assert (t1["n"], t1["n_groups"], t1["accuracy"], t1["balanced_accuracy"]) == (2, 2, 1.0, 1.0)
    assert t1["ci95"] is None and "not estimable" in t1["ci95_note"] and t1["clears_image_free"] is None
    t2 = next(c for c in m["cells"] if c["family"] == "T2")
    assert (t2["accuracy"], t2["balanced_accuracy"], t2["n_groups"]) == (0.0, 0.0, 1)
    assert t2["baselines"] == {"random": 0.25, "label_prior": 0.5, "majority": 0.5, "image_free_best": 0.5}
    assert m["by_task"]["T2"]["invalid_rate"] == 1.0
    assert m["by_level"]["none"]["n"] == 4 and set(m["definitions"]) >= {"accuracy", "balanced_accuracy", "ci95"}


def test_cell_intervals_resample_groups_and_are_never_zero_width(cfg):
    """Ten groups of four items: the bootstrap interval spans the groups' spread; one group is not estimable."""
    spec = [
        (f"i{g}_{k}", "T6", "S", "L2", f"g{g}", "A" if k < (g % 4) + 1 else "B", ["moving", "stationary"])
        for g in range(10)
        for k in range(4)
    ]
    ev = _rows(spec)
    sft = pl.DataFrame({"source": ["S"], "task_id": ["T6"], "answer_text": ["moving"]})
    preds = {r["item_id"]: "A" for r in ev.iter_rows(named=True)}
    m = score.metrics(score.item_table(ev, sft, preds), cfg)
    c = m["cells"][0]
    assert c["level"] == "L2" and c["n_groups"] == 10 and c["accuracy"] == 0.575  # (1+2+3+4+1+2+3+4+1+2)/40
    lo, hi = c["ci95"]
    assert lo < 0.575 < hi and hi - lo > 0.05
    # answering "moving" always: the label prior; balanced accuracy of a one-label predictor = 1/k
    assert c["baselines"]["label_prior"] == c["accuracy"] and c["balanced_accuracy"] == 0.5
    assert c["clears_image_free"] is False and score.flag(c) == "NO BETTER THAN IMAGE-FREE"
    one = score.metrics(score.item_table(ev.with_columns(pl.lit("g").alias("split_group_id")), sft, preds), cfg)
    assert one["cells"][0]["ci95"] is None and "1 split group" in one["cells"][0]["ci95_note"]
    gold = {r["item_id"]: r["answer"] for r in ev.iter_rows(named=True)}
    g = score.metrics(score.item_table(ev, sft, gold), cfg)["cells"][0]
    assert g["accuracy"] == 1.0 and g["ci95"] is None and "every resample" in g["ci95_note"]


def test_balanced_accuracy_of_a_one_label_predictor_is_one_over_k(cfg):
    labels = ["a", "b", "c"]
    spec = [(f"i{i}", "T4", "S", "L1", f"g{i}", "ABC"[i % 3 if i < 30 else 0], labels) for i in range(60)]
    ev = _rows(spec)
    sft = pl.DataFrame({"source": ["S"], "task_id": ["T4"], "answer_text": ["a"]})
    m = score.metrics(score.item_table(ev, sft, {f"i{i}": "A" for i in range(60)}), cfg)
    c = m["cells"][0]
    assert c["accuracy"] == round(40 / 60, 4) and c["balanced_accuracy"] == round(1 / 3, 4)
    assert c["baselines"]["majority"] == round(40 / 60, 4)


def test_gold_scores_one(demo_release, tmp_path, cfg, capsys):
    ev = score.read_release(demo_release, cfg)["eval"]
    assert set(ev["eval_level"]) == {"L1", "L2", "L3"}  # every level's file, not the main eval file alone
    m, out = _run(
        demo_release,
        tmp_path,
        cfg,
        {r["item_id"]: f"reasoning...\n{r['sft_target']}" for r in ev.iter_rows(named=True)},
    )
    o = m["overall"]
    assert (o["accuracy"], o["invalid_rate"], o["n"]) == (1.0, 0.0, ev.height)
    assert o["ci95"] is None and "every resample" in o["ci95_note"]  # never a zero-width interval
    assert o["task_macro_accuracy"] == 1.0 and o["source_macro_accuracy"] == 1.0 and o["balanced_accuracy"] == 1.0
    assert set(m["by_level"]) == {"L1", "L2", "L3"} and all(b["accuracy"] == 1.0 for b in m["by_level"].values())
    assert all(b["accuracy"] == 1.0 for b in m["by_task"].values())
    assert all(c["accuracy"] == 1.0 and c["ci95"] is None for c in m["cells"])
    assert set(m["by_task"]) == set(ev["task_id"]) and set(m["by_source"]) == set(ev["source"])
    assert {c["level"] for c in m["cells"]} == {"L1", "L2", "L3"} and m["predictions"]["extra"] == 0
    assert 0 < o["baselines"]["random"] < 1
    assert (out / "metrics.md").read_text().startswith("| slice |")
    assert (out / "accuracy_by_task.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert str(out / "metrics.json") in printed and "L3: accuracy 1.0000" in printed


def test_label_prior_predictor_scores_the_reported_label_prior(demo_release, tmp_path, cfg):
    """label_prior per cell = the expected score of answering, among each item's options, the most frequent SFT
    answer text of its (source, family), a uniform pick among the texts that tie: where nothing ties, a predictor
    answering that text scores it exactly; where texts tie, the earliest tied option (the old rule, a position habit)
    scores something else in some cells, and the hand-computed expectation is what is reported. No cell's interval
    has zero width."""
    from collections import Counter

    from pipeline.validity.baselines import options

    tables = score.read_release(demo_release, cfg)
    by_cell, by_family = score._label_priors(tables["sft"])
    rows = tables["eval"].to_dicts()
    preds, expect = {}, {}
    for r in rows:
        prior = by_cell.get((r["source"], r["task_id"])) or by_family.get(r["task_id"]) or Counter()
        opts = options(r)
        top = max(prior.get(o, 0) for o in opts)
        tied = [o for o in opts if prior.get(o, 0) == top]
        letter = next(c for c in "ABCDEF" if r[f"choice_{c}"] == tied[0])
        preds[r["item_id"]] = f"<ANSWER>{letter}</ANSWER>"
        key = (r["source"], r["task_id"], score._level(r))
        expect.setdefault(key, []).append((1 / len(tied) if r["answer_text"] in tied else 0.0, len(tied) > 1))
    (tmp_path / "first").mkdir()
    m, _ = _run(demo_release, tmp_path / "first", cfg, preds)
    assert len(m["cells"]) > 40
    differ = 0
    for c in m["cells"]:
        hits = expect[(c["source"], c["family"], c["level"])]
        assert c["baselines"]["label_prior"] == round(sum(h for h, _ in hits) / len(hits), 4), c
        if not any(t for _, t in hits):
            assert c["accuracy"] == c["baselines"]["label_prior"], c
        differ += c["accuracy"] != c["baselines"]["label_prior"]
        assert c["ci95"] is None or c["ci95"][0] < c["ci95"][1]
        assert c["baselines"]["image_free_best"] == max(c["baselines"][b] for b in score.BASELINES)
        assert c["clears_image_free"] is not True
    assert differ > 0  # the demo has ties where "the earliest option" is not the expectation
    assert any(c["ci95"] is None and "split group" in c["ci95_note"] for c in m["cells"])


def test_label_prior_ties_score_their_expectation_not_the_first_option():
    """Two SFT answer texts tie: the baseline is 1/2 on every item whose answer is one of them, wherever it stands
    (answering the earliest tied option would score 1 when the answer comes first and 0 when it comes second)."""
    from collections import Counter

    prior = {("s", "T1"): Counter({"a": 3, "b": 3, "c": 1})}
    row = {"source": "s", "task_id": "T1", "num_choices": 3, "choice_A": "a", "choice_B": "b", "choice_C": "c"}
    assert score.label_prior_credit(row | {"answer_text": "a"}, prior, {}) == 0.5
    assert score.label_prior_credit(row | {"answer_text": "b"}, prior, {}) == 0.5
    assert score.label_prior_credit(row | {"answer_text": "c"}, prior, {}) == 0.0
    swapped = row | {"choice_A": "b", "choice_B": "a"}
    assert score.label_prior_credit(swapped | {"answer_text": "a"}, prior, {}) == 0.5


def test_levels_filter_keeps_other_levels_out_of_extra(demo_release, tmp_path, cfg):
    ev = score.read_release(demo_release, cfg)["eval"]
    preds = {r["item_id"]: r["sft_target"] for r in ev.iter_rows(named=True)}
    m, _ = _run(demo_release, tmp_path, cfg, preds)
    pf = _write(tmp_path / "p2.jsonl", [{"item_id": k, "response": v} for k, v in preds.items()])
    assert (
        score.main(
            ["--release", str(demo_release), "--predictions", str(pf), "--out", str(tmp_path / "l2"), "--levels", "L2"],
            cfg,
        )
        == 0
    )
    m2 = json.loads((tmp_path / "l2" / "metrics.json").read_text())
    n2 = ev.filter(pl.col("eval_level") == "L2").height
    assert set(m2["by_level"]) == {"L2"} and m2["overall"]["n"] == n2
    assert m2["predictions"]["extra"] == 0 and m2["predictions"]["other_levels"] == ev.height - n2
    assert (
        score.main(
            ["--release", str(demo_release), "--predictions", str(pf), "--out", str(tmp_path / "l9"), "--levels", "L9"],
            cfg,
        )
        == 2
    )


def test_shuffled_answers(demo_release, tmp_path, cfg):
    ev = score.read_release(demo_release, cfg)["eval"]
    wrong = {
        r["item_id"]: "ABCDEF"[("ABCDEF".index(r["answer"]) + 1) % r["num_choices"]] for r in ev.iter_rows(named=True)
    }
    m, _ = _run(demo_release, tmp_path, cfg, wrong)
    assert m["overall"]["accuracy"] == 0.0 and m["overall"]["invalid_rate"] == 0.0
    # answers shuffled across items: a valid guess per item, accuracy well below 1
    answers = ev["answer"].to_list()
    rolled = answers[1:] + answers[:1]
    (tmp_path / "b").mkdir()
    m2, _ = _run(demo_release, tmp_path / "b", cfg, dict(zip(ev["item_id"].to_list(), rolled)))
    assert m2["overall"]["invalid_rate"] < 0.2 and m2["overall"]["accuracy"] < 0.7


def test_unparseable_is_invalid(demo_release, tmp_path, cfg):
    ev = score.read_release(demo_release, cfg)["eval"]
    m, _ = _run(demo_release, tmp_path, cfg, {i: "I am not sure." for i in ev["item_id"]})
    assert m["overall"]["invalid_rate"] == 1.0 and m["overall"]["accuracy"] == 0.0


def test_missing_and_extra_ids_are_reported(demo_release, tmp_path, cfg, caplog):
    ev = score.read_release(demo_release, cfg)["eval"]
    ids = ev["item_id"].to_list()
    responses = {i: f"<ANSWER>{a}</ANSWER>" for i, a in zip(ids[2:], ev["answer"].to_list()[2:])}
    responses["pb_v2_eval_999999"] = "A"
    with caplog.at_level(logging.WARNING, logger="pipeline.scoring.mcq"):
        m, _ = _run(demo_release, tmp_path, cfg, responses)
    assert m["predictions"]["missing"] == 2 and m["predictions"]["extra"] == 1
    assert m["predictions"]["extra_examples"] == ["pb_v2_eval_999999"]
    assert m["overall"]["invalid_rate"] == pytest.approx(2 / ev.height, abs=1e-4)
    assert "no prediction" in caplog.text and "name no eval item" in caplog.text


def test_bad_predictions_file_is_a_clear_error(demo_release, tmp_path, cfg, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a", "response": "A"}\nnot json\n')
    rc = score.main(["--release", str(demo_release), "--predictions", str(bad), "--out", str(tmp_path / "o")], cfg)
    assert rc == 2 and f"{bad}:2: not JSON" in capsys.readouterr().err
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"item_id": "a", "response": "A"}\n{"item_id": "b", "response": "caf\xe9"}\n')
    rc = score.main(["--release", str(demo_release), "--predictions", str(latin), "--out", str(tmp_path / "o")], cfg)
    assert rc == 2 and f"{latin}:2: not UTF-8" in capsys.readouterr().err
    dup = _write(tmp_path / "dup.jsonl", [{"item_id": "a", "response": "A"}, {"item_id": "a", "response": "B"}])
    with pytest.raises(ValueError, match="dup.jsonl:2: item a predicted twice"):
        score.read_predictions(dup)


def test_cli_score_and_determinism(demo_release, tmp_path):
    cfg = load_settings()
    ev = score.read_release(demo_release, cfg)["eval"]
    preds = _write(tmp_path / "p.jsonl", [{"item_id": i, "response": "A"} for i in ev["item_id"]])
    outs = []
    for k in range(2):
        out = tmp_path / f"s{k}"
        assert cli.main(["score", "--release", str(demo_release), "--predictions", str(preds), "--out", str(out)]) == 0
        outs.append((out / "metrics.json").read_bytes())
    assert outs[0] == outs[1]


def test_metric_definitions_are_the_documented_ones():
    """The docs' scorer section states each metric by the same formula the scorer writes into metrics.json."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "release-format.md").read_text(encoding="utf-8")
    for name, text in score.METRIC_DEFINITIONS.items():
        assert f"  - **{name}**: {text}\n" in doc, name
