"""The human check: review pages (pipeline/review.py) driven in a real headless Chromium (the Debian package, through
playwright; .ci/run installs it), verdicts exported from the page and merged into the validity report by item uid
(pipeline/validity/human.py, `processbench validity --human`), multiple-choice and T13 step pages; verdicts of another
build carried over for exactly the unchanged items and refused for the rest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.core.io import compact_json
from pipeline.frames.pixels import encode_png
from pipeline.release.files import file_names, write_checksums
from pipeline.release.prompts import format_prompt
from pipeline.review import build_review, sample_cells
from pipeline.settings.config import load_settings
from pipeline.release.files import step_files
from pipeline.validity.human import choice_cells, load_verdicts, match_verdicts, step_classes
from tests.factories import make_step_row, step_table

CFG = load_settings()
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Chromium not installed (.ci/run installs the Debian package)"
)
LOADED = "els => els.filter(e => e.complete && e.naturalWidth > 0).length"


# ------------------------------------------------------------------------------------------------ hand-made releases


def _mcq_row(family: str, i: int, question: str | None = None) -> dict:
    t2 = family == "T2"
    row = {
        "source_slug": "gm100",
        "task_id": family,
        "eval_level": "L1",
        "question": question
        or (
            "Is the left gripper currently in contact with anything?"
            if t2
            else "Which labeled panel happened earlier in the real manipulation sequence, X or Y?"
        ),
        "num_choices": 2,
        "choice_A": "Yes — contact established" if t2 else "X",
        "choice_B": "No — no contact" if t2 else "Y",
        "answer": "AB"[i % 2] if t2 else "A",
        "split_group_id": f"g{i}",
        "reconstruction_key_json": compact_json(
            {"camera": "cam_high", "frame_indices": [10 * i + (0 if t2 else 5)], "source": "gm100", "unit": f"u{i}"}
        ),
        "display_labels_json": None if t2 else compact_json(["X", "Y"]),
    }
    for c in "CDEF":
        row[f"choice_{c}"] = None
    return row


def _step_rows(changed: bool = False) -> list[dict]:
    """Five T13 eval items: gm100 and reassemble, every step class (correct, neutral, natural and injected wrong
    kinds). `changed`: the last gm100 item's second sentence reworded (a new item, a new uid)."""
    specs = [
        ("gm100", [1, -1, 0, 1], [None, "swapped_frames", None, None]),
        ("gm100", [1, 1, -1, 1, 0], [None, None, "contact_flipped", None, None]),
        ("gm100", [0, 1, 1, -1], [None, None, None, "swapped_frames"]),
        ("reassemble", [1, -1, 1, -1], [None, "natural_primitive_failure", None, "substituted_chain"]),
        ("reassemble", [1, 1, 0, -1], [None, None, None, "natural_action_failure"]),
    ]
    rows = []
    for n, (slug, corr, kinds) in enumerate(specs):
        row = make_step_row(n, corr, slug=slug, source={"gm100": "GM-100"}.get(slug, "REASSEMBLE"), kinds=kinds)
        if changed and n == 2:
            steps = list(row["response"]["steps"])
            steps[1] = "The gripper closes on the part slowly."
            row["response"] = {**row["response"], "steps": steps}
        rows.append(row)
    return rows


def make_release(tmp: Path, name: str = "a", rebuilt: bool = False, steps: bool = True) -> tuple[Path, Path, dict]:
    """A sealed release folder (uids, fingerprint, checksums) with one eval file of gm100 T2 and T9 items, optionally
    the T13 step files, and the reconstructed images of its eval items. `rebuilt`: a second build of it, as a rebuild
    makes one: an item added at the front (so every item_id is renumbered), two multiple-choice items and one step
    item changed, the rest unchanged (same uid, another item_id). Returns (release, images, {item_id: row})."""
    from pipeline.release.identity import mcq_uid, stamp_release, step_uid, template_variants

    variants = template_variants(CFG)
    rel, img = tmp / name / "release", tmp / name / "images"
    mcq = [_mcq_row("T2", 99, "Is the right gripper currently in contact with anything?")] if rebuilt else []
    for i in range(6):
        mcq.append(_mcq_row("T2", i, "Is the left gripper touching anything now?" if rebuilt and i == 1 else None))
        mcq.append(_mcq_row("T9", i, "Which panel came first, X or Y?" if rebuilt and i == 2 else None))
    for n, r in enumerate(mcq):
        r["item_id"] = f"pb_v2_eval_{n + 1:06d}"
        r["item_uid"] = mcq_uid(r, variants[r["task_id"]])
    files = file_names(CFG)
    path = rel / files["eval_parquet"]
    path.parent.mkdir(parents=True)
    pl.DataFrame(mcq).write_parquet(path)
    pl.DataFrame(mcq).clear().write_parquet(rel / files["sft_parquet"])
    rows = {r["item_id"]: r for r in mcq}
    if steps:
        srows = _step_rows(changed=rebuilt)
        if rebuilt:  # one step item more, in front: every step item_id moves
            srows.insert(0, make_step_row(99, [1, 1, -1], slug="gm100", source="GM-100"))
        for n, r in enumerate(srows):
            r["item_id"] = f"pb_v2_steps_eval_{n + 1:06d}"
            r["image"] = [f"images/{r['item_id']}_{k}.png" for k in range(r["num_steps"])]
            r["item_uid"] = step_uid(r, variants[r["task_id"]])
        names = step_files(CFG)
        step_table(srows).write_parquet(rel / names["L1"][0])
        step_table(srows).clear().write_parquet(rel / names["sft"][0])
        rows.update({r["item_id"]: r for r in srows})
    (rel / "metadata").mkdir()
    (rel / files["provenance"]).write_text("{}\n")
    (rel / "metadata" / "validity_report.json").write_text(
        json.dumps(
            {
                "version": 2,
                "eval_items": len(mcq),
                "sft_items": 0,
                "near_duplicate_hamming": 4,
                "cells": [],
                "problems": [],
            }
        )
    )
    write_checksums(rel, CFG, known=stamp_release(rel, CFG)[1])
    img.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for r in rows.values():
        n = r.get("num_steps") or (1 if r["task_id"] == "T9" else 2)
        for k in range(n):
            png = encode_png(rng.integers(0, 255, (24, 32, 3), np.uint8), 1)
            (img / f"{r['item_id']}_{k}.png").write_bytes(png)
    return rel, img, rows


def _verdict_file(path: Path, rel: Path, track: str, family: str, who: str, verdicts: list[dict], **over) -> Path:
    from pipeline.release.identity import release_fingerprint

    doc = {
        "format": "processbench-review-verdicts",
        "version": 2,
        "release": "v1",
        "release_fingerprint": release_fingerprint(rel, CFG),
        "track": track,
        "source": "gm100",
        "family": family,
        "annotator": who,
        "verdicts": verdicts,
        **over,
    }
    path.write_text(json.dumps(doc))
    return path


def _page_data(page: Path) -> dict:
    text = page.read_text()
    start = text.index('<script id="data" type="application/json">') + len('<script id="data" type="application/json">')
    return json.loads(text[start : text.index("</script>", start)])


def _report(rel: Path) -> dict:
    return json.loads((rel / "metadata" / "validity_report.json").read_text())


def test_review_takes_the_reconstruct_folder_as_eval_does(tmp_path, capsys):
    """Issue 40: `review --images` took only the images folder; given `reconstruct --out`'s folder it left every item
    out. Both are taken now (pipeline/reconstruct.py images_folder), and a folder with neither is one line."""
    from assets.cli import main as cli

    rel, img, rows = make_release(tmp_path, steps=False)  # tmp/a/images/<item_id>_<k>.png: as `reconstruct --out tmp/a`
    (img.parent / CFG.frames.reconstruction.report_file).write_text("{}")
    n_files = len(list(img.iterdir()))
    for given in (img.parent, img):
        out = tmp_path / f"review_{given.name}"
        args = ["review", "--release", str(rel), "--images", str(given), "--out", str(out), "--per-cell", "50"]
        assert cli(args) == 0
        assert "no images" not in capsys.readouterr().out
        assert len(list((out / "images").iterdir())) == n_files  # every sampled item kept with its images
    (tmp_path / "empty").mkdir()
    args = ["review", "--release", str(rel), "--images", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]
    assert cli(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "expected the folder `processbench reconstruct --out` wrote" in line and str(tmp_path / "empty") in line


# ------------------------------------------------------------------------------------------------ sampling, figures


def test_sample_ranks_items_by_their_uid_alone():
    rows = [{"item_uid": f"u{i:03d}", "source_slug": "gm100", "task_id": "T2"} for i in range(50)]
    a, b = sample_cells(rows, 10, 7), sample_cells(list(reversed(rows)), 10, 7)
    assert a == b and len(a[("gm100", "T2")]) == 10
    assert sample_cells(rows, 10, 8) != a
    # a rebuild adds 5 items: every old item still sampled was sampled before, and at most 5 are pushed out
    more = rows + [{"item_uid": f"new{i}", "source_slug": "gm100", "task_id": "T2"} for i in range(5)]
    old = {r["item_uid"] for r in a[("gm100", "T2")]}
    kept = {r["item_uid"] for r in sample_cells(more, 10, 7)[("gm100", "T2")]} - {f"new{i}" for i in range(5)}
    assert kept <= old and len(kept) >= 5


def test_choice_cells_accuracy_agreement_and_decidable():
    key = {f"a{i}": ("gm100", "T2", "A", 2) for i in range(40)} | {f"b{i}": ("gm100", "T9", "A", 2) for i in range(40)}
    v = []
    for who in ("ann1", "ann2"):
        v += [{"annotator": who, "item_uid": f"a{i}", "answer": "A", "cannot_tell": False} for i in range(40)]
        # T9: a coin flip (alternating answers), the second annotator also says "cannot tell" on 10 items
        v += [
            {
                "annotator": who,
                "item_uid": f"b{i}",
                "answer": None if (who == "ann2" and i < 10) else "AB"[i % 2],
                "cannot_tell": who == "ann2" and i < 10,
            }
            for i in range(40)
        ]
    cells = {c["family"]: c for c in choice_cells(v, key, CFG.validity.human)}
    assert cells["T2"]["accuracy"] == 1.0 and cells["T2"]["decidable"] and cells["T2"]["agreement"]["agreement"] == 1.0
    assert cells["T9"]["accuracy"] == pytest.approx(35 / 80) and not cells["T9"]["decidable"]
    assert cells["T9"]["cannot_tell"] == pytest.approx(10 / 80) and cells["T9"]["agreement"]["agreement"] == 0.75
    # too few judgments: never called decidable, even at 100 %
    few = choice_cells([x for x in v if x["item_uid"] in ("a1", "a2")], key, CFG.validity.human)
    assert few[0]["accuracy"] == 1.0 and not few[0]["decidable"]


def test_step_classes_give_agreement_per_class_of_label():
    key = {
        "i1": ("gm100", [1, -1, 0, 1], [None, "swapped_frames", None, None]),
        "i2": ("reassemble", [1, -1, -1], [None, "natural_primitive_failure", "substituted_chain"]),
    }
    said = {  # per annotator, per item, the verdict of each step
        "ann1": {"i1": ["right", "wrong", "right", "right"], "i2": ["right", "wrong", "unsure"]},
        "ann2": {"i1": ["right", "right", "unsure", "wrong"], "i2": ["wrong", "wrong", "wrong"]},
    }
    v = [
        {"annotator": who, "item_uid": uid, "step": k, "verdict": x}
        for who, items in said.items()
        for uid, xs in items.items()
        for k, x in enumerate(xs)
    ]
    rows = {(r["source"], r["class"]): r for r in step_classes(v, key, CFG.validity.human)}
    order = [(r["source"], r["class"]) for r in step_classes(v, key, CFG.validity.human)]
    assert order[:7] == [
        ("all", "correct"),
        ("all", "wrong"),
        ("all", "wrong: natural"),
        ("all", "wrong: injected"),
        ("all", "wrong: natural_primitive_failure"),
        ("all", "wrong: swapped_frames"),
        ("all", "wrong: substituted_chain"),
    ] and order[7] == ("all", "neutral")
    # correct steps: i1/0, i1/3, i2/0, judged by both: right 4 of 6 (ann2 said wrong on i1/3 and i2/0)
    c = rows[("all", "correct")]
    assert (c["judgments"], c["steps"], c["agreement"], c["right"], c["wrong"]) == (
        6,
        3,
        round(4 / 6, 4),
        0.6667,
        0.3333,
    )
    assert c["ci"][0] < c["agreement"] < c["ci"][1]
    # between annotators on the correct steps: equal on i1/0 only of 3 shared
    assert c["between_annotators"]["agreement"] == round(1 / 3, 4) and c["between_annotators"]["shared_items"] == 3
    w = rows[("all", "wrong")]  # i1/1, i2/1, i2/2: wrong 4 of 6 (ann2 right on i1/1, ann1 unsure on i2/2)
    assert (w["judgments"], w["agreement"], w["unsure"]) == (6, round(4 / 6, 4), round(1 / 6, 4))
    assert rows[("all", "wrong: natural")]["agreement"] == 1.0 and rows[("all", "wrong: injected")]["agreement"] == 0.5
    assert rows[("all", "wrong: substituted_chain")]["agreement"] == 0.5
    assert rows[("all", "wrong: swapped_frames")]["agreement"] == 0.5
    n = rows[("all", "neutral")]  # a neutral step implies no verdict: shares only
    assert n["agreement"] is None and n["ci"] is None and (n["right"], n["unsure"]) == (0.5, 0.5)
    assert rows[("gm100", "correct")]["judgments"] == 4 and rows[("reassemble", "correct")]["judgments"] == 2
    assert ("gm100", "wrong: natural") not in rows


# ------------------------------------------------------------------------------------------------ bad verdict files

GOOD_MCQ = [{"item_uid": "u1", "item_id": "i1", "answer": "A", "cannot_tell": False}]


@pytest.mark.parametrize(
    "text,reason",
    [
        (lambda good: good[: len(good) // 2], "not a readable JSON"),  # truncated
        (lambda good: json.dumps({"results": {"T2": {"acc": 0.5}}, "config": {}}), "not a processbench-review"),
        (lambda good: json.dumps([{"item_id": "i1", "answer": "A"}]), "not a processbench-review"),
        (lambda good: '{"item_id": "i1", "response": "A"}\n{"item_id": "i2"}\n', "not a readable JSON"),  # jsonl
        (lambda good: good.replace('"version": 2', '"version": 1'), "without item uids"),
        (lambda good: good.replace('"ann1"', '"  "'), "annotator"),
        (lambda good: good.replace('"annotator": "ann1", ', ""), "annotator"),
        (lambda good: good.replace('"answer": "A"', '"answer": "Q"'), "verdicts.0.answer"),
        (lambda good: good.replace('"cannot_tell": false', '"cannot_tell": true'), "verdicts.0"),
        (lambda good: good.replace('"track": "mcq"', '"track": "steps"'), "verdicts.0"),
        (lambda good: good.replace('"item_uid": "u1"', '"item_uid": "u1", "item_uid": "u2"'), "duplicate key"),
        (lambda good: good.replace('"release_fingerprint": "f"', '"release_fingerprint": ""'), "release_fingerprint"),
    ],
)
def test_bad_verdict_file_is_one_line_naming_it(tmp_path, text, reason):
    good = json.dumps(
        {
            "format": "processbench-review-verdicts",
            "version": 2,
            "release_fingerprint": "f",
            "track": "mcq",
            "source": "gm100",
            "family": "T2",
            "annotator": "ann1",
            "verdicts": GOOD_MCQ,
        }
    )
    ok = tmp_path / "ok.json"
    ok.write_text(good)
    assert load_verdicts([ok])[0].annotator == "ann1"
    bad = tmp_path / "bad.json"
    bad.write_text(text(good))
    with pytest.raises(ValueError) as exc:
        load_verdicts([ok, bad])
    msg = str(exc.value)
    assert msg.startswith(str(bad)) and reason in msg and "\n" not in msg, msg


def test_step_verdicts_are_checked(tmp_path):
    doc = {
        "format": "processbench-review-verdicts",
        "version": 2,
        "release_fingerprint": "f",
        "track": "steps",
        "source": "gm100",
        "family": "T13",
        "annotator": "ann1",
        "verdicts": [{"item_uid": "u1", "step": 0, "verdict": "right"}],
    }
    f = tmp_path / "v.json"
    f.write_text(json.dumps(doc))
    assert load_verdicts([f])[0].verdicts[0].verdict == "right"
    for row, reason in (
        ({"item_uid": "u1", "step": "0", "verdict": "right"}, "verdicts.0.step"),
        ({"item_uid": "u1", "step": -1, "verdict": "right"}, "verdicts.0.step"),
        ({"item_uid": "u1", "step": 0, "verdict": "maybe"}, "verdicts.0.verdict"),
        ({"item_uid": "u1", "step": 0, "verdict": "right", "label": 1}, "verdicts.0.label"),
    ):
        f.write_text(json.dumps({**doc, "verdicts": [row]}))
        with pytest.raises(ValueError, match=reason):
            load_verdicts([f])
    # a step past the item's steps names the file and the item (matched against the release's key)
    f.write_text(json.dumps({**doc, "verdicts": [{"item_uid": "u1", "step": 4, "verdict": "right"}]}))
    key = {"mcq": {}, "steps": {"u1": ("gm100", [1, 1], [None, None])}}
    with pytest.raises(ValueError, match="v.json: step 4 of item u1, which has 2 steps"):
        match_verdicts(load_verdicts([f]), key, "f")


# ------------------------------------------------------------------------------------------------ carry-over by uid


def test_verdicts_of_another_build_merge_for_unchanged_items_only(tmp_path, capsys):
    from assets.cli import main as cli
    from pipeline.release.identity import release_fingerprint

    a, _, rows_a = make_release(tmp_path, "a")
    b, _, rows_b = make_release(tmp_path, "b", rebuilt=True)
    fp_a, fp_b = release_fingerprint(a, CFG), release_fingerprint(b, CFG)
    assert fp_a != fp_b
    uids_b = {r["item_uid"]: r for r in rows_b.values()}
    # ann1 judged every multiple-choice item and every step of build a: the key's answer, "wrong" on every step
    mcq = [r for r in rows_a.values() if r["task_id"] != "T13"]
    steps = [r for r in rows_a.values() if r["task_id"] == "T13"]
    f_mcq = _verdict_file(
        tmp_path / "ann1_mcq.json",
        a,
        "mcq",
        "T2",
        "ann1",
        [
            {"item_uid": r["item_uid"], "item_id": r["item_id"], "answer": r["answer"], "cannot_tell": False}
            for r in mcq
        ],
    )
    f_steps = _verdict_file(
        tmp_path / "ann1_steps.json",
        a,
        "steps",
        "T13",
        "ann1",
        [
            {"item_uid": r["item_uid"], "item_id": r["item_id"], "step": k, "verdict": "wrong"}
            for r in steps
            for k in range(r["num_steps"])
        ],
    )
    changed_mcq = [r for r in mcq if r["item_uid"] not in uids_b]
    changed_steps = [r for r in steps if r["item_uid"] not in uids_b]
    assert len(changed_mcq) == 2 and len(changed_steps) == 1
    assert all(rows_a[i]["item_uid"] != rows_b[i]["item_uid"] for i in rows_a)  # every item_id names another item
    before = (b / "metadata" / "validity_report.json").read_bytes()
    # refused: named by file and counted; nothing merged, the report untouched
    assert cli(["validity", "--release", str(b), "--human", str(f_mcq), str(f_steps)]) == 2
    out = capsys.readouterr().out
    assert f"ann1_mcq.json: 2 of {len(mcq)} verdicts name items not in this release" in out
    n_changed = changed_steps[0]["num_steps"]
    assert f"ann1_steps.json: {n_changed} of {sum(r['num_steps'] for r in steps)} verdicts name items" in out
    assert f"made for release {fp_a[:12]}…, this is {fp_b[:12]}…" in out and "--drop-unknown" in out
    assert (b / "metadata" / "validity_report.json").read_bytes() == before
    # asked to drop them: the unchanged items merged by uid (their answers right against b's key), the rest counted
    assert cli(["validity", "--release", str(b), "--human", str(f_mcq), str(f_steps), "--drop-unknown"]) == 0
    out = capsys.readouterr().out
    assert f"ann1_mcq.json (ann1, gm100 T2): {len(mcq) - 2} of {len(mcq)} verdicts merged, 2 on items" in out
    assert f"made for another release ({fp_a[:12]}…)" in out
    human = _report(b)["human"]
    files = {r["file"]: r for r in human["files"]}
    assert files["ann1_mcq.json"]["refused"] == 2 and not files["ann1_mcq.json"]["this_release"]
    assert files["ann1_mcq.json"]["release_fingerprint"] == fp_a  # whole in the report
    assert files["ann1_steps.json"]["refused"] == n_changed
    assert sum(c["judgments"] for c in human["cells"]) == len(mcq) - 2
    assert all(c["accuracy"] == 1.0 for c in human["cells"])  # matched to the same item: the key agrees
    kept_steps = [r for r in steps if r["item_uid"] in uids_b]
    labels = [x for r in kept_steps for x in r["response"]["process_correctness"]]
    classes = {c["class"]: c for c in human["steps"] if c["source"] == "all"}
    assert classes["wrong"]["judgments"] == labels.count(-1) and classes["wrong"]["agreement"] == 1.0
    assert classes["correct"]["judgments"] == labels.count(1) and classes["correct"]["agreement"] == 0.0
    assert classes["neutral"]["judgments"] == labels.count(0)
    md = (b / "metadata" / "validity_report.md").read_text()
    assert f"another release ({fp_a[:12]}…)" in md and "Left out (--drop-unknown)" in md
    # its own release's file: merged whole, "this release"
    f_own = _verdict_file(
        tmp_path / "ann2.json",
        b,
        "mcq",
        "T2",
        "ann2",
        [
            {"item_uid": r["item_uid"], "answer": "A", "cannot_tell": False}
            for r in rows_b.values()
            if "answer" in r and r["task_id"] != "T13"
        ],
    )
    assert cli(["validity", "--release", str(b), "--human", str(f_own)]) == 0
    assert _report(b)["human"]["files"][0]["this_release"] and "ann2.json" in capsys.readouterr().out


def test_bad_verdict_input_changes_nothing(tmp_path, capsys):
    from assets.cli import main as cli

    rel, _, rows = make_release(tmp_path, steps=False)
    good = _verdict_file(
        tmp_path / "good.json",
        rel,
        "mcq",
        "T2",
        "ann1",
        [{"item_uid": r["item_uid"], "answer": "A", "cannot_tell": False} for r in rows.values()],
    )
    truncated = tmp_path / "truncated.json"
    truncated.write_text(good.read_text()[:200])
    other_tool = tmp_path / "results.json"
    other_tool.write_text(json.dumps({"results": {"processbench": {"acc,none": 0.61}}, "versions": {}}))
    report = rel / "metadata" / "validity_report.json"
    sums = (rel / "checksums.sha256").read_bytes()
    before = report.read_bytes()
    for bad in (truncated, other_tool):
        assert cli(["validity", "--release", str(rel), "--human", str(good), str(bad)]) == 2
        out = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("release ")]
        assert len(out) == 1 and out[0].startswith(f"processbench validity: {bad}"), out
        assert report.read_bytes() == before and (rel / "checksums.sha256").read_bytes() == sums
    assert cli(["validity", "--release", str(rel), "--human", str(good)]) == 0
    assert _report(rel)["human"]["cells"]


def test_prefill_carries_exactly_the_unchanged_items(tmp_path, capsys):
    from assets.cli import main as cli

    a, _, rows_a = make_release(tmp_path, "a")
    b, img_b, rows_b = make_release(tmp_path, "b", rebuilt=True)
    uids_b = {r["item_uid"] for r in rows_b.values()}
    t2 = [r for r in rows_a.values() if r["task_id"] == "T2"]
    steps = [r for r in rows_a.values() if r["task_id"] == "T13" and r["source_slug"] == "gm100"]
    f1 = _verdict_file(
        tmp_path / "v_t2.json",
        a,
        "mcq",
        "T2",
        "ann1",
        [{"item_uid": r["item_uid"], "item_id": r["item_id"], "answer": "B", "cannot_tell": False} for r in t2],
    )
    f2 = _verdict_file(
        tmp_path / "v_steps.json",
        a,
        "steps",
        "T13",
        "ann1",
        [{"item_uid": r["item_uid"], "step": k, "verdict": "unsure"} for r in steps for k in range(r["num_steps"])],
    )
    out = tmp_path / "review"
    assert (
        cli(["review", "--release", str(b), "--images", str(img_b), "--out", str(out), "--prefill", str(f1), str(f2)])
        == 0
    )
    printed = capsys.readouterr().out
    assert (
        "prefill v_t2.json (ann1): 5 of 6 verdicts carried over (same item); 1 on items not in this release" in printed
    )
    page = _page_data(out / "review_gm100_T2.html")
    assert set(page["prefill"]) == {"ann1"}
    assert set(page["prefill"]["ann1"]) == {r["item_uid"] for r in t2} & uids_b
    assert all(v == {"answer": "B", "cannot_tell": False} for v in page["prefill"]["ann1"].values())
    sp = _page_data(out / "review_gm100_T13.html")
    kept = [r for r in steps if r["item_uid"] in uids_b]
    assert set(sp["prefill"]["ann1"]) == {r["item_uid"] for r in kept} and len(kept) == len(steps) - 1
    assert all(set(v.values()) == {"unsure"} for v in sp["prefill"]["ann1"].values())
    assert _page_data(out / "review_gm100_T9.html")["prefill"] == {}
    # a bad prefill file: one line, no page written
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert (
        cli(
            [
                "review",
                "--release",
                str(b),
                "--images",
                str(img_b),
                "--out",
                str(tmp_path / "r2"),
                "--prefill",
                str(bad),
            ]
        )
        == 2
    )
    assert capsys.readouterr().out.startswith(f"processbench review: {bad}") and not (tmp_path / "r2").exists()


# ------------------------------------------------------------------------------------------------ in the browser


def _name(page, who: str) -> None:
    page.fill("#annotator", who)
    page.locator("#annotator").blur()


def _export(page, path: Path) -> dict:
    with page.expect_download() as dl:
        page.click("#export")
    dl.value.save_as(path)
    return json.loads(path.read_text())


@needs_chromium
def test_review_page_round_trip_in_chromium(tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    from assets.cli import main as cli
    from pipeline.release.identity import release_fingerprint

    rel, img, rows = make_release(tmp_path, steps=False)
    out = tmp_path / "review"
    summary = build_review(rel, img, out, CFG, per_cell=4)
    assert [(p["family"], p["items"]) for p in summary["pages"]] == [("T2", 4), ("T9", 4)]
    shutil.rmtree(img)  # the pages are self-contained: their images were copied next to them
    page_file = out / "review_gm100_T2.html"
    by_id = {r["item_id"]: r for r in rows.values()}
    files = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for who, keys in (("ann1", ["A", "B", "click:A", "0"]), ("ann2", ["1", "B", "?", "2"])):
            ctx = browser.new_context(accept_downloads=True)  # a fresh profile: its own localStorage
            page = ctx.new_page()
            page.goto(page_file.as_uri())
            page.keyboard.press("A")  # no name yet: no verdict is taken
            assert page.inner_text("#done") == "0 answered" and "Enter your name" in page.inner_text("#msg")
            assert page.eval_on_selector_all("#answers button", "bs => bs.every(b => b.disabled)")
            page.fill("#annotator", who)
            page.press("#annotator", "A")  # typing in the name field answers nothing
            _name(page, who)
            seen = []
            for k in keys:
                item = by_id[page.inner_text("#item")]
                assert page.inner_text("#prompt") == format_prompt(item, CFG) and item["item_id"] not in seen
                seen.append(item["item_id"])
                # images load asynchronously: wait (generously) until both are decoded, then count exactly
                page.wait_for_function(
                    f"(({LOADED})([...document.querySelectorAll('#imgs img')])) >= 2", timeout=60_000
                )
                assert page.eval_on_selector_all("#imgs img", LOADED) == 2  # exactly the item's images, from disk
                if k.startswith("click:"):
                    page.click(f"#answers button[data-answer='{k[6:]}']")
                else:
                    page.keyboard.press(k)
            assert page.inner_text("#done") == "4 answered"
            page.reload()  # progress is kept in the browser
            assert page.inner_text("#done") == "4 answered" and page.input_value("#annotator") == who
            path = tmp_path / f"verdicts_{who}.json"
            data = _export(page, path)
            files.append(path)
            assert data["annotator"] == who and [v["item_id"] for v in data["verdicts"]] == seen
            assert data["release_fingerprint"] == release_fingerprint(rel, CFG)
            assert [v["item_uid"] for v in data["verdicts"]] == [by_id[i]["item_uid"] for i in seen]
            assert data["verdicts"][3 if who == "ann1" else 2] == {
                "item_uid": by_id[seen[3 if who == "ann1" else 2]]["item_uid"],
                "item_id": seen[3 if who == "ann1" else 2],
                "answer": None,
                "cannot_tell": True,
            }
            assert '"answer"' not in page.eval_on_selector("#data", "e => e.textContent")  # no key in the page
            ctx.close()
        browser.close()
    # merge into the validity report
    assert cli(["validity", "--release", str(rel), "--human", *map(str, files)]) == 0
    report = _report(rel)
    cell = report["human"]["cells"][0]
    got = [v for f in files for v in json.loads(f.read_text())["verdicts"]]
    right = sum(v["answer"] == by_id[v["item_id"]]["answer"] for v in got)
    assert (cell["source"], cell["family"], cell["judgments"]) == ("gm100", "T2", 8)
    assert cell["accuracy"] == round(right / 8, 4) and report["human"]["annotators"] == ["ann1", "ann2"]
    assert cell["agreement"]["pairs"] == 1 and cell["agreement"]["shared_items"] == 4
    assert not cell["decidable"] and report["human"]["not_decidable"] == ["gm100/T2"]  # 8 < min_judgments
    md = (rel / "metadata" / "validity_report.md").read_text()
    assert "## Human check" in md and "| gm100 | T2 | 8 |" in md
    assert "HUMAN: gm100/T2" in capsys.readouterr().out


@needs_chromium
def test_step_page_verdicts_merge_into_per_class_figures(tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    from assets.cli import main as cli

    rel, img, rows = make_release(tmp_path)
    out = tmp_path / "review"
    summary = build_review(rel, img, out, CFG, per_cell=10)
    steps = {(p["source"], p["family"]): p for p in summary["pages"] if p["track"] == "steps"}
    assert {k: p["items"] for k, p in steps.items()} == {("gm100", "T13"): 3, ("reassemble", "T13"): 2}
    page_file = out / "review_gm100_T13.html"
    data = _page_data(page_file)
    text = page_file.read_text()
    assert data["track"] == "steps" and "process_correctness" not in text and "swapped_frames" not in text
    by_uid = {r["item_uid"]: r for r in rows.values()}
    exported = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(accept_downloads=True)
        page = ctx.new_page()
        page.goto(page_file.as_uri())
        assert page.eval_on_selector_all("button[data-verdict]", "bs => bs.every(b => b.disabled)")
        _name(page, "ann1")
        for n in range(len(data["items"])):
            uid = data["items"][n]["item_uid"]
            item = by_uid[uid]
            assert page.inner_text("#item") == item["item_id"]
            assert page.inner_text("#goal") == "Goal: " + item["question"]
            sentences = page.eval_on_selector_all(".step .sentence", "es => es.map(e => e.textContent)")
            assert sentences == [f"Step {k + 1}: {s}" for k, s in enumerate(item["response"]["steps"])]
            page.wait_for_function(
                f"(({LOADED})([...document.querySelectorAll('.step img')])) >= {item['num_steps']}", timeout=60_000
            )
            # each step beside its own frames, in the item's image order
            shown = page.eval_on_selector_all(
                ".step", "rs => rs.map(r => [...r.querySelectorAll('img')].map(i => i.getAttribute('src')))"
            )
            index = json.loads(item["step_image_index_json"])
            assert shown == [[f"images/{item['item_id']}_{i}.png" for i in ix] for ix in index]
            # ann1 says the label: right for 1, wrong for -1, unsure for 0; keys for the first item, clicks after
            for k, label in enumerate(item["response"]["process_correctness"]):
                if n == 0:
                    page.keyboard.press({1: "1", -1: "2", 0: "0"}[label])
                else:
                    verdict = {1: "right", -1: "wrong", 0: "unsure"}[label]
                    page.click(f".step[data-step='{k}'] button[data-verdict='{verdict}']")
        total = sum(by_uid[it["item_uid"]]["num_steps"] for it in data["items"])
        assert page.inner_text("#done") == f"{total} steps judged"
        exported.append(_export(page, tmp_path / "ann1.json"))
        # a second annotator in the same browser: an empty page; the second says "wrong" everywhere
        _name(page, "ann2")
        assert page.inner_text("#done") == "0 steps judged"
        page.click("#prev")
        page.click("#prev")
        page.click("#prev")
        for _ in range(total):
            page.keyboard.press("w")
        exported.append(_export(page, tmp_path / "ann2.json"))
        _name(page, "ann1")  # back: ann1's verdicts as they were
        assert page.inner_text("#done") == f"{total} steps judged"
        ctx.close()
        browser.close()
    assert [len(e["verdicts"]) for e in exported] == [total, total]
    assert all(set(v) == {"item_uid", "item_id", "step", "verdict"} for e in exported for v in e["verdicts"])
    assert (
        cli(["validity", "--release", str(rel), "--human", str(tmp_path / "ann1.json"), str(tmp_path / "ann2.json")])
        == 0
    )
    human = _report(rel)["human"]
    got = {c["class"]: c for c in human["steps"] if c["source"] == "all"}
    labels = [
        (x, kd)
        for it in data["items"]
        for x, kd in zip(
            by_uid[it["item_uid"]]["response"]["process_correctness"],
            json.loads(by_uid[it["item_uid"]]["step_error_kinds_json"]),
        )
    ]
    n_right, n_wrong, n_neutral = (sum(x == v for x, _ in labels) for v in (1, -1, 0))
    # ann1 agrees everywhere, ann2 only on wrong steps
    assert got["correct"]["judgments"] == 2 * n_right and got["correct"]["agreement"] == 0.5
    assert got["wrong"]["judgments"] == 2 * n_wrong and got["wrong"]["agreement"] == 1.0
    assert got["wrong: swapped_frames"]["agreement"] == 1.0 and got["wrong: contact_flipped"]["steps"] == 1
    assert got["neutral"]["agreement"] is None and got["neutral"]["unsure"] == 0.5 and got["neutral"]["wrong"] == 0.5
    assert (
        got["correct"]["between_annotators"]["agreement"] == 0.0
        and got["wrong"]["between_annotators"]["agreement"] == 1.0
    )
    assert n_neutral == got["neutral"]["steps"]
    md = (rel / "metadata" / "validity_report.md").read_text()
    assert "| all | correct |" in md and "| gm100 | wrong: swapped_frames |" in md
    assert "HUMAN: steps/correct: agrees 0.500" in capsys.readouterr().out


@needs_chromium
def test_a_page_never_shows_another_releases_answers(tmp_path):
    """Two builds of one release (one item changed, the rest renumbered): the same annotator in the same browser sees
    an empty page of the rebuilt release, and pre-filled from the old verdict file only the unchanged items."""
    from playwright.sync_api import sync_playwright

    a, img_a, rows_a = make_release(tmp_path, "a", steps=False)
    b, img_b, rows_b = make_release(tmp_path, "b", rebuilt=True, steps=False)
    build_review(a, img_a, tmp_path / "review_a", CFG, per_cell=20)
    build_review(b, img_b, tmp_path / "review_b", CFG, per_cell=20)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = browser.new_context(accept_downloads=True)  # one profile: one localStorage for both folders
        page = ctx.new_page()
        page.goto((tmp_path / "review_a" / "review_gm100_T2.html").as_uri())
        _name(page, "ann1")
        for _ in range(6):
            page.keyboard.press("A")
        assert page.inner_text("#done") == "6 answered"
        old = _export(page, tmp_path / "old.json")
        page.goto((tmp_path / "review_b" / "review_gm100_T2.html").as_uri())
        assert page.input_value("#annotator") == "" and page.inner_text("#done") == "0 answered"
        _name(page, "ann1")
        assert page.inner_text("#done") == "0 answered"  # another release: not its answers
        # the rebuilt release's review pre-filled from the old file: exactly the unchanged items
        summary = build_review(b, img_b, tmp_path / "review_c", CFG, per_cell=20, prefill=[tmp_path / "old.json"])
        assert summary["prefill"][0]["carried"] == 5 and summary["prefill"][0]["not_in_release"] == 1
        page.goto((tmp_path / "review_c" / "review_gm100_T2.html").as_uri())
        _name(page, "ann1")
        assert page.inner_text("#done") == "5 answered"
        new = _export(page, tmp_path / "new.json")
        ctx.close()
        browser.close()
    uids_b = {r["item_uid"]: r for r in rows_b.values()}
    assert {v["item_uid"] for v in new["verdicts"]} == {v["item_uid"] for v in old["verdicts"]} & set(uids_b)
    assert all(v["item_id"] == uids_b[v["item_uid"]]["item_id"] for v in new["verdicts"])  # b's ids
    assert new["release_fingerprint"] != old["release_fingerprint"]


# ------------------------------------------------------------------------------------------------ the demo release


def test_demo_release_review_covers_the_step_track(demo_release, demo_samples, tmp_path, capsys):
    """The built demo release: T13 pages per source from its real step files and reconstructed images, and verdicts on
    them merged by uid into per-class figures that match its labels."""
    from assets.cli import main as cli
    from pipeline.reconstruct import reconstruct
    from pipeline.review import eval_rows, step_eval_rows

    rel = tmp_path / "release"
    shutil.copytree(demo_release, rel)
    per_cell = 2
    rows = eval_rows(rel, CFG) + step_eval_rows(rel, CFG)
    chosen = {r["item_id"] for rs in sample_cells(rows, per_cell, int(CFG.build.release_seed)).values() for r in rs}
    report = reconstruct(
        rel, dict(demo_samples), CFG, tmp_path / "recon", sources=sorted(demo_samples), item_ids=chosen
    )
    assert report["images_written"]
    out = tmp_path / "review"
    summary = build_review(rel, tmp_path / "recon" / "images", out, CFG, per_cell=per_cell)
    step_pages = [p for p in summary["pages"] if p["track"] == "steps"]
    sources = sorted({r["source_slug"] for r in rows if r["track"] == "steps"})
    assert sorted(p["source"] for p in step_pages) == sources and not summary["missing_images"]
    # a verdict "right" on every step of every page
    files = []
    for p in step_pages:
        data = _page_data(out / p["page"])
        verdicts = [
            {"item_uid": it["item_uid"], "step": k, "verdict": "right"}
            for it in data["items"]
            for k in range(len(it["steps"]))
        ]
        files.append(
            _verdict_file(tmp_path / f"v_{p['source']}.json", rel, "steps", "T13", "ann1", verdicts, source=p["source"])
        )
    assert cli(["validity", "--release", str(rel), "--human", *map(str, files)]) == 0
    got = {(c["source"], c["class"]): c for c in _report(rel)["human"]["steps"]}
    key = {r["item_uid"]: r for r in pl.read_parquet(rel / step_files(CFG)["L1"][0]).to_dicts()}
    for lv in ("L2", "L3"):
        if (rel / step_files(CFG)[lv][0]).exists():
            key |= {r["item_uid"]: r for r in pl.read_parquet(rel / step_files(CFG)[lv][0]).to_dicts()}
    judged = [uid for f in files for uid in {v["item_uid"] for v in json.loads(f.read_text())["verdicts"]}]
    labels = [x for uid in judged for x in key[uid]["response"]["process_correctness"]]
    assert got[("all", "correct")]["judgments"] == labels.count(1) and got[("all", "correct")]["agreement"] == 1.0
    if labels.count(-1):
        assert got[("all", "wrong")]["judgments"] == labels.count(-1) and got[("all", "wrong")]["agreement"] == 0.0
    assert got.get(("all", "neutral"), {"steps": 0})["steps"] == labels.count(0)
