"""What the release holds against its quotas (pipeline/release/quotas.py): a cell per (source, family) and per
source of the step track, the reasons taken from the build's own records, their copies in the card, the manifests
and task_distribution.csv, and the validator's hold on them. Hand-made tables; the demo release's copy is in
tests/test_release_quotas.py."""

from __future__ import annotations

import csv

import polars as pl

from pipeline.items.selection import quotas
from pipeline.publish.provenance import quota_cells
from pipeline.release import quotas as Q
from pipeline.release import writers
from pipeline.settings.config import load_settings

CFG = load_settings(scale="demo")
REASON = "its candidate pool holds only 2 items (No 1, Yes 1), all of them taken"


def _full() -> dict[tuple[str, str], int]:
    return {(s, t): q for s in CFG.build.sources for t, q in quotas(CFG, s).items() if q}


def _summary(**gm100) -> dict:
    return {
        "sources": {
            s: {"quota": 24, "items": 24, "units": 9} | (gm100 if s == "gm100" else {}) for s in CFG.build.sources
        }
    }


def test_every_cell_is_listed_and_a_short_one_says_why():
    delivered = _full() | {("reassemble", "T7"): 2}
    delivered |= {(s, "T13"): 24 for s in CFG.build.sources}
    records = [{"source": "reassemble", "task_id": "T7", "quota": 22, "selected": 2, "missing": 20, "reason": REASON}]
    cells = quota_cells(CFG, delivered, records, _summary())
    assert len(cells) == len(_full()) + len(CFG.build.sources)
    short = [c for c in cells if "short" in c]
    quota = quotas(CFG, "reassemble")["T7"]
    assert short == [
        {"source": "reassemble", "task_id": "T7", "delivered": 2, "quota": quota, "short": quota - 2, "reason": REASON}
    ]
    assert [c["source"] for c in cells][0] == "gm100" and cells[-1] == {
        "source": "aist",
        "task_id": "T13",
        "delivered": 24,
        "quota": 24,
    }
    assert Q.cell_line(short[0], CFG) == (
        f"REASSEMBLE T7 Operation Outcome Prediction: 2 of {quota} items ({quota - 2} short): {REASON}"
    )
    assert Q.quota_problems(cells, delivered, "p.json") == []


def test_a_short_cell_without_a_record_still_says_what_the_build_measured():
    delivered = _full() | {("aist", "T3"): 40}
    (cell,) = [c for c in quota_cells(CFG, delivered, [], None) if "short" in c]
    assert cell["reason"] == f"the selection found 40 usable candidates for a quota of {cell['quota']}"
    # a record made before the frames stage wrote reasons: the sentence is made from its figures
    old = {"source": "aist", "task_id": "T3", "quota": cell["quota"], "selected": 40, "pool": 90, "near_selected": 50}
    old |= {"pool_labels": {"Up": 90}, "min_gap": 20}
    (cell,) = [c for c in quota_cells(CFG, delivered, [old], None) if "short" in c]
    assert cell["reason"] == (
        "of its 90 candidates (Up 90), 40 were taken and 50 lie within 20 frames of an item chosen from the same "
        "recording (min_gap)"
    )


def test_the_step_track_reason_is_the_summary_s_own_or_made_from_its_figures():
    delivered = _full() | {(s, "T13"): 24 for s in CFG.build.sources} | {("gm100", "T13"): 18}
    # the step stage's own reason (a field it may record), and items made but dropped for unreadable frames
    cells = quota_cells(CFG, delivered, [], _summary(items=20, reason="few windows\nper unit"))
    (cell,) = [c for c in cells if "short" in c]
    assert cell == {
        "source": "gm100",
        "task_id": "T13",
        "delivered": 18,
        "quota": 24,
        "short": 6,
        "reason": "few windows per unit; 2 more were dropped because their frames could not be read",
    }
    cells = quota_cells(CFG, delivered | {("gm100", "T13"): 20}, [], _summary(items=20, units_without_side=3))
    (cell,) = [c for c in cells if "short" in c]
    assert cell["reason"].startswith("its 9 units with a split side hold no more candidate windows")
    assert "3 units have no split side" in cell["reason"]


def test_the_validator_holds_the_cells_to_the_rows():
    delivered = _full() | {("reassemble", "T7"): 2}
    records = [{"source": "reassemble", "task_id": "T7", "reason": REASON}]
    cells = quota_cells(CFG, delivered, records)
    assert Q.quota_problems(cells, delivered, "p.json") == []
    bad = [dict(c) for c in cells]
    bad[0]["delivered"] += 1  # planted: a wrong count
    assert "p.json: quotas[0]: gm100 T1 delivered 61, the release files hold 60" in Q.quota_problems(
        bad, delivered, "p.json"
    )
    short = next(i for i, c in enumerate(cells) if "short" in c)
    for edit, want in (
        ({"reason": ""}, "without a one-line reason"),
        ({"short": 1}, "quota - delivered is"),
        ({"reason": "two\nlines"}, "without a one-line reason"),
    ):
        bad = [dict(c) for c in cells]
        bad[short] |= edit
        assert any(want in p for p in Q.quota_problems(bad, delivered, "p.json")), edit
    assert any("no cell for gm100 T1" in p for p in Q.quota_problems(cells[1:], delivered, "p.json"))
    assert any("listed twice" in p for p in Q.quota_problems(cells + cells[:1], delivered, "p.json"))
    full = [dict(c) for c in cells]
    full[0]["reason"] = "planted"
    assert any("full but carries a shortfall" in p for p in Q.quota_problems(full, delivered, "p.json"))
    assert Q.quota_problems({"a": 1}, delivered, "p.json") == ["p.json: quotas is not a list of cells"]


def test_card_and_csv_give_the_cells():
    delivered = _full() | {("reassemble", "T7"): 2, ("rh20t", "T7"): 78}
    delivered |= {(s, "T13"): 24 for s in CFG.build.sources}
    records = [{"source": "reassemble", "task_id": "T7", "reason": REASON}]
    cells = quota_cells(CFG, delivered, records, _summary())
    card = Q.card_section(cells, CFG)
    rows = [ln for ln in card.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == len(cells)  # a line per cell
    q7 = quotas(CFG, "reassemble")["T7"]
    assert f"| REASSEMBLE | T7 Operation Outcome Prediction | 2 | {q7} | {q7 - 2} short: {REASON} |" in rows
    assert "2 of " in card and "cells fall short" in card
    ev = pl.DataFrame(
        {
            "task_id": ["T7", "T7"],
            "num_choices": [2, 2],
            "answer": ["A", "B"],
            "answer_text": ["Yes", "No"],
        }
    )
    text = writers.task_distribution_csv(ev, CFG, cells)
    head, *rows = list(csv.reader(text.splitlines()))
    assert head[-3:] == ["delivered", "quota", "shortfall_reason"]
    by_task = {r[0]: dict(zip(head, r)) for r in rows}
    t7 = by_task["T7"]
    assert t7["eval_n"] == "2" and int(t7["delivered"]) == sum(v for (s, t), v in delivered.items() if t == "T7")
    assert t7["shortfall_reason"].count(" short): ") == 2 and "REASSEMBLE: 2 of" in t7["shortfall_reason"]
    assert by_task["T13"]["eval_n"] == "" and by_task["T13"]["quota"] == str(24 * len(CFG.build.sources))
    assert by_task["T1"]["shortfall_reason"] == "" and by_task["T1"]["eval_n"] == ""
    # without a record the columns are there and empty
    (row,) = list(csv.reader(writers.task_distribution_csv(ev, CFG).splitlines()))[1:]
    assert row[-3:] == ["", "", ""]
