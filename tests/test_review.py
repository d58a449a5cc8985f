"""The human check: review pages (pipeline/review.py) driven in a real headless Chromium (the Debian package, through
playwright; .ci/run installs it), verdicts exported from the page and merged into the validity report
(pipeline/validity/human.py, `processbench validity --human`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.settings.config import load_settings
from pipeline.frames.pixels import encode_png
from pipeline.release.prompts import format_prompt
from pipeline.release.files import file_names
from pipeline.review import build_review, sample_cells
from pipeline.validity.human import human_report, load_verdicts

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


def _release(tmp: Path, n: int = 6) -> tuple[Path, Path, list[dict]]:
    """A release folder with one eval file (gm100 T2 and T9 items) and the reconstructed images of its items."""
    rel, img = tmp / "release", tmp / "images"
    rows = []
    for i in range(n):
        rows.append(
            {
                "item_id": f"pb_v2_t2_{i:03d}",
                "source_slug": "gm100",
                "task_id": "T2",
                "eval_level": "L1",
                "question": "Is the left gripper currently in contact with anything?",
                "num_choices": 2,
                "choice_A": "Yes — contact established",
                "choice_B": "No — no contact",
                "answer": "AB"[i % 2],
                "split_group_id": f"g{i}",
            }
        )
        rows.append(
            {
                "item_id": f"pb_v2_t9_{i:03d}",
                "source_slug": "gm100",
                "task_id": "T9",
                "eval_level": "L1",
                "question": "Which labeled panel happened earlier in the real manipulation sequence, X or Y?",
                "num_choices": 2,
                "choice_A": "X",
                "choice_B": "Y",
                "answer": "A",
                "split_group_id": f"g{i}",
            }
        )
    for c in "CDEF":
        for r in rows:
            r[f"choice_{c}"] = None
    path = rel / file_names(CFG)["eval_parquet"]
    path.parent.mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(path)
    (rel / "metadata").mkdir()
    (rel / "metadata" / "validity_report.json").write_text(
        json.dumps(
            {
                "version": 1,
                "eval_items": len(rows),
                "sft_items": 0,
                "near_duplicate_hamming": 4,
                "cells": [],
                "problems": [],
            }
        )
    )
    img.mkdir()
    rng = np.random.default_rng(0)
    for r in rows:
        for k in range(1 if r["task_id"] == "T9" else 2):
            (img / f"{r['item_id']}_{k}.png").write_bytes(encode_png(rng.integers(0, 255, (24, 32, 3), np.uint8), 1))
    return rel, img, rows


def test_review_takes_the_reconstruct_folder_as_eval_does(tmp_path, capsys):
    """Issue 40: `review --images` took only the images folder; given `reconstruct --out`'s folder it left every item
    out. Both are taken now (pipeline/frames/reconstruct.py images_folder), and a folder with neither is one line."""
    from assets.cli import main as cli

    rel, img, rows = _release(tmp_path)  # tmp/images/<item_id>_<k>.png: what `reconstruct --out tmp` writes
    (tmp_path / CFG.frames.reconstruction.report_file).write_text("{}")
    n_files = len(list(img.iterdir()))
    for given in (tmp_path, img):
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


def test_sample_is_seeded_and_capped():
    rows = [{"item_id": f"i{i:03d}", "source_slug": "gm100", "task_id": "T2"} for i in range(50)]
    a, b = sample_cells(rows, 10, 7), sample_cells(list(reversed(rows)), 10, 7)
    assert a == b and len(a[("gm100", "T2")]) == 10
    assert sample_cells(rows, 10, 8) != a


def test_human_report_accuracy_agreement_and_decidable():
    key = {f"a{i}": ("gm100", "T2", "A", 2) for i in range(40)} | {f"b{i}": ("gm100", "T9", "A", 2) for i in range(40)}
    v = []
    for who in ("ann1", "ann2"):
        v += [{"annotator": who, "item_id": f"a{i}", "answer": "A", "cannot_tell": False} for i in range(40)]
        # T9: a coin flip (alternating answers), the second annotator also says "cannot tell" on 10 items
        v += [
            {
                "annotator": who,
                "item_id": f"b{i}",
                "answer": None if (who == "ann2" and i < 10) else "AB"[i % 2],
                "cannot_tell": who == "ann2" and i < 10,
            }
            for i in range(40)
        ]
    rep = human_report(v, key, CFG.validity.human)
    cells = {c["family"]: c for c in rep["cells"]}
    assert cells["T2"]["accuracy"] == 1.0 and cells["T2"]["decidable"] and cells["T2"]["agreement"]["agreement"] == 1.0
    assert cells["T9"]["accuracy"] == pytest.approx(35 / 80) and not cells["T9"]["decidable"]
    assert cells["T9"]["cannot_tell"] == pytest.approx(10 / 80) and cells["T9"]["agreement"]["agreement"] == 0.75
    assert rep["not_decidable"] == ["gm100/T9"]
    # too few judgments: never called decidable, even at 100 %
    few = human_report([x for x in v if x["item_id"] in ("a1", "a2")], key, CFG.validity.human)
    assert few["cells"][0]["accuracy"] == 1.0 and not few["cells"][0]["decidable"]


def test_bad_verdict_files_name_the_file(tmp_path):
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="v.json"):
        load_verdicts([bad])
    bad.write_text(
        json.dumps(
            {
                "format": "processbench-review-verdicts",
                "version": 1,
                "verdicts": [{"item_id": "x", "answer": "Q", "cannot_tell": False}],
            }
        )
    )
    with pytest.raises(ValueError, match="verdict 0"):
        load_verdicts([bad])


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Chromium not installed (.ci/run installs the Debian package)")
def test_review_page_round_trip_in_chromium(tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    from assets.cli import main as cli

    rel, img, rows = _release(tmp_path)
    out = tmp_path / "review"
    summary = build_review(rel, img, out, CFG, per_cell=4)
    assert [(p["family"], p["items"]) for p in summary["pages"]] == [("T2", 4), ("T9", 4)]
    shutil.rmtree(img)  # the pages are self-contained: their images were copied next to them
    page_file = out / "review_gm100_T2.html"
    by_id = {r["item_id"]: r for r in rows}
    files = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for who, keys in (("ann1", ["A", "B", "click:A", "0"]), ("ann2", ["1", "B", "?", "2"])):
            ctx = browser.new_context(accept_downloads=True)  # a fresh profile: its own localStorage
            page = ctx.new_page()
            page.goto(page_file.as_uri())
            page.fill("#annotator", who)
            page.press("#annotator", "A")  # typing in the name field answers nothing
            page.fill("#annotator", who)
            page.locator("#annotator").blur()
            seen = []
            for k in keys:
                item = by_id[page.inner_text("#item")]
                assert page.inner_text("#prompt") == format_prompt(item, CFG) and item["item_id"] not in seen
                seen.append(item["item_id"])
                loaded = "els => els.filter(e => e.complete && e.naturalWidth > 0).length"
                # images load asynchronously: wait (generously) until both are decoded, then count exactly
                page.wait_for_function(
                    f"(({loaded})([...document.querySelectorAll('#imgs img')])) >= 2", timeout=60_000
                )
                n_img = page.eval_on_selector_all("#imgs img", loaded)
                assert n_img == 2  # exactly the item's images, loaded from disk
                if k.startswith("click:"):
                    page.click(f"#answers button[data-answer='{k[6:]}']")
                else:
                    page.keyboard.press(k)
            assert page.inner_text("#done") == "4 answered"
            page.reload()  # progress is kept in the browser
            assert page.inner_text("#done") == "4 answered" and page.input_value("#annotator") == who
            with page.expect_download() as dl:
                page.click("#export")
            path = tmp_path / f"verdicts_{who}.json"
            dl.value.save_as(path)
            files.append(path)
            data = json.loads(path.read_text())
            assert data["annotator"] == who and [v["item_id"] for v in data["verdicts"]] == seen
            assert data["verdicts"][3 if who == "ann1" else 2] == {
                "item_id": seen[3 if who == "ann1" else 2],
                "answer": None,
                "cannot_tell": True,
            }
            assert '"answer"' not in page.eval_on_selector("#data", "e => e.textContent")  # no key in the page
            ctx.close()
        browser.close()
    assert all(set(json.loads(f.read_text())["verdicts"][0]) == {"item_id", "answer", "cannot_tell"} for f in files)
    # merge into the validity report
    assert cli(["validity", "--release", str(rel), "--human", *map(str, files)]) == 0
    report = json.loads((rel / "metadata" / "validity_report.json").read_text())
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
