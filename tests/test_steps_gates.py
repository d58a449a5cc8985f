"""The T13 step track's blind gates (pipeline/steps/gates.py) and their place in the validity audit: a planted text
give-away fails the gate, a clean track passes, small cells are reported but not checked."""

from __future__ import annotations

import pytest

from factories import step_table, synthetic_step_rows
from pipeline.settings.config import load_settings
from pipeline.steps.gates import GATES, gate_markdown, gate_problems, step_gates
from pipeline.validity import problems
from pipeline.validity.report import render_markdown


@pytest.fixture(scope="module")
def vcfg():
    return load_settings().validity


def _pooled(scfg):
    """The pooled gates alone: no per-class cell fitted (tests/test_steps_blind.py checks those; fitting them on
    these tables would cost CI minutes)."""
    return scfg.model_copy(update={"classes": scfg.classes.model_copy(update={"min_wrong": 10**6})})


def _tables(giveaway=None, n_eval=300, n_sft=1200):
    ev = synthetic_step_rows(n_eval, seed=1, giveaway=giveaway)
    sf = synthetic_step_rows(n_sft, split="sft", seed=2, giveaway=giveaway, start=10_000)
    return step_table(ev), step_table(sf)


def test_a_clean_track_passes_every_gate(vcfg):
    scfg = _pooled(vcfg.steps)
    rep = step_gates(*_tables(), scfg)
    (cell,) = rep["cells"]
    assert cell["checked"] and cell["eval_steps"] >= vcfg.steps.min_steps
    assert all(cell[g] is not None for g in GATES)
    assert gate_problems(rep, scfg) == [], cell


def test_a_word_only_in_wrong_steps_fails_the_text_gates(vcfg):
    scfg = _pooled(vcfg.steps)
    rep = step_gates(*_tables(giveaway="suddenly"), scfg)
    found = gate_problems(rep, scfg)
    assert any("text_classifier" in p and p.startswith("reassemble/T13/L1") for p in found), found
    assert any("ngram" in p for p in found), found  # the wrong step's sentence is a new token in the chain
    (cell,) = rep["cells"]
    assert cell["text_classifier"] > 0.95
    # the audit blocks on them like on its other limits, and the report shows them per cell
    assert set(found) <= set(problems({"cells": [], "steps": rep}, vcfg))
    md = render_markdown({"cells": [], "near_duplicate_hamming": 4, "steps": rep, "problems": found})
    assert "Step track (T13)" in md and "| reassemble | L1 |" in md


def test_a_cell_below_min_steps_is_reported_not_checked(vcfg):
    scfg = _pooled(vcfg.steps).model_copy(update={"min_steps": 10**6})
    rep = step_gates(*_tables(giveaway="suddenly", n_eval=40, n_sft=200), scfg)
    assert not rep["cells"][0]["checked"] and gate_problems(rep, scfg) == []
    assert any("| no |" in line for line in gate_markdown(rep))


def test_an_audit_without_steps_has_no_step_section(vcfg):
    assert "Step track" not in render_markdown({"cells": [], "near_duplicate_hamming": 4, "problems": []})
    assert problems({"cells": []}, vcfg) == []
