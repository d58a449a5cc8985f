"""Step items built by the step track's own code (pipeline/steps/items.py, perturb.py, rows.py) from REASSEMBLE-shaped
records - the release-scale sample planner's high-level actions and low-level chains, about one action in ten failing
with its chain cut at the failed primitive, as in the real recordings - against the blind gates of
pipeline/steps/gates.py: every gate checks a cell (pooled, and per class for the natural errors and an injected
kind) and passes; a planted leak in the natural class (successful chains shown whole, so "the chain ends before Lift or
Release" marks every failure) and one in an injected kind (swapped frames only ever at the start of an item) fails."""

from __future__ import annotations

import polars as pl
import pytest

from factories import fake_hash, reassemble_plan_tables
from pipeline.settings.config import load_settings
from pipeline.steps import gates, items, perturb
from pipeline.steps.rows import step_rows
from pipeline.steps.stage import _donor_chains

UNITS = 14
SEED = 5


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="release")


@pytest.fixture(scope="module")
def tables():
    return reassemble_plan_tables(UNITS, seed=SEED)


def _report(cfg, tables, monkeypatch=None, leak=None):
    tpl = cfg.step_tasks["T13"]
    lab, ir, units = tables
    if leak == "natural":  # no failure cuts a successful chain: every chain is shown whole
        monkeypatch.setattr(items, "failure_chains", lambda actions: set())
    if leak == "swapped_frames":  # the swap always at the start of the item, with the first partner there
        swap = perturb.KINDS["swapped_frames"]
        monkeypatch.setitem(perturb.KINDS, "swapped_frames", lambda d, site, ctx: swap(d, 0, {**ctx, "u": 0.0}))
    drafts = items.build_drafts("reassemble", units, lab, ir, tpl, 10**6, SEED)
    items.set_outcome_wording(drafts, tpl, SEED, "reassemble")
    perturb.inject(drafts, tpl, SEED, "reassemble", perturb.donors_of(_donor_chains("reassemble", units, lab, ir, tpl)))
    meta = {("reassemble", u["unit_id"]): u for u in units.iter_rows(named=True)}
    hashes = {
        ("reassemble", st["unit_id"], st["camera"], int(f)): fake_hash(st["unit_id"], f)
        for d in drafts
        for st in d["steps"]
        for f in st["frames"]
    }
    rows = step_rows(drafts, meta, hashes, tpl, cfg)
    # the audit's gates with fewer folds and trees (a test budget; the release uses configs/validity.yaml's)
    scfg = cfg.validity.steps.model_copy(
        update={
            "classes": cfg.validity.steps.classes.model_copy(update={"folds": 3}),
            "boosted": cfg.validity.steps.boosted.model_copy(update={"max_iter": 40}),
        }
    )
    report = gates.step_gates(rows.filter(pl.col("split") == "eval"), rows.filter(pl.col("split") == "sft"), scfg)
    return report, gates.gate_problems(report, scfg)


def _checked(report, cls):
    return [c for c in report["classes"] if c["class"] == cls and c["checked"]]


def test_built_items_pass_every_gate_in_every_checked_cell(cfg, tables):
    report, problems = _report(cfg, tables)
    (pooled,) = report["cells"]
    assert pooled["checked"] and all(pooled[g] is not None for g in gates.GATES)
    for cls in ("natural", "swapped_frames", "substituted_chain"):  # each class checked by every gate
        cells = _checked(report, cls)
        assert cells and all(c[g] is not None for c in cells for g in gates.CLASS_GATES), cls
    assert problems == [], problems
    # and no two steps of an item show the same or a nearby frame, whatever their label
    assert {c["class"]: c["shared"] for c in report["frames"]} == dict.fromkeys(
        {c["class"] for c in report["frames"]}, 0
    )


def test_successful_chains_shown_whole_give_the_natural_errors_away(cfg, tables, monkeypatch):
    report, problems = _report(cfg, tables, monkeypatch, leak="natural")
    assert _checked(report, "natural")
    found = [p for p in problems if "tells natural wrong steps" in p]
    assert any("text_classifier" in p for p in found) and any("boosted" in p for p in found), problems
    assert not any("tells swapped_frames" in p for p in problems)


def test_swapped_frames_always_at_the_start_are_caught(cfg, tables, monkeypatch):
    report, problems = _report(cfg, tables, monkeypatch, leak="swapped_frames")
    assert any("position_prior tells swapped_frames" in p for p in problems), problems
    assert not any("tells natural" in p for p in problems)
