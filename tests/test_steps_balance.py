"""REASSEMBLE's step items against the blind gates: a give-away planted in the items (wrong steps concentrated on one
primitive, as the sources' recorded failures are) makes the text-only classifier gate fail, and the thinning of
pipeline/steps/balance.py removes it; an action's failure claim is wrong no more often than the configured share; a
REASSEMBLE action never takes a truncation that would shorten its item; candidates holding recorded failures are
picked first under the per-unit cap."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from pipeline.settings.config import load_settings
from pipeline.settings.steps import StepBalance
from pipeline.steps import gates, items, perturb
from pipeline.steps.balance import balance, step_features
from pipeline.steps.rows import step_rows

from tests.test_steps_items import reassemble_tables

VERBS = ("Approach", "Align", "Grasp", "Lift", "Pull", "Release")


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(scope="module")
def tpl(cfg):
    return cfg.step_tasks["T13"]


def _draft(k: int, tpl, rng, pull_wrong: float, other_wrong: float) -> dict:
    uid = f"r{k:04d}"
    steps = []
    for j in range(5):
        verb = VERBS[int(rng.integers(len(VERBS)))]
        wrong = rng.random() < (pull_wrong if verb == "Pull" else other_wrong)
        steps.append(
            items.make_step(
                "primitive",
                (30 * j, 30 * j + 29),
                tpl,
                fields={"primitive": verb, "action": "Pick gear."},
                unit_id=uid,
                camera="cam",
                value=verb,
                action=0,
                natural="natural_primitive_failure" if wrong else None,
            )
        )
    failed = bool(rng.random() < other_wrong)  # a recorded action failure stated as a success
    end = items.make_step(
        "action_outcome",
        (138, 149),
        tpl,
        fields={"action": "Pick gear."},
        truth=not failed,
        unit_id=uid,
        camera="cam",
        action=0,
    )
    end["label"] = 1
    items.set_claim(end, True, "natural_action_failure")
    return {
        "source": "reassemble",
        "unit_id": uid,
        "camera": "cam",
        "key": f"{uid}/0000/1",
        "split": "eval" if k % 3 == 0 else "sft",
        "eval_level": "L1" if k % 3 == 0 else None,
        "split_group_id": f"g{k:04d}",
        "steps": steps + [end],
    }


def _gate_report(cfg, tpl, drafts):
    units = {("reassemble", d["unit_id"]): {"task_id": "t", "unit_type": "recording", "licence": "MIT"} for d in drafts}
    hashes = {
        ("reassemble", st["unit_id"], st["camera"], int(f)): f"{i:064x}"
        for i, (d, st) in enumerate((d, st) for d in drafts for st in d["steps"])
        for f in st["frames"]
    }
    rows = step_rows(drafts, units, hashes, tpl, cfg)
    report = gates.step_gates(
        rows.filter(rows["split"] == "eval"), rows.filter(rows["split"] == "sft"), cfg.validity.steps
    )
    return report, gates.gate_problems(report, cfg.validity.steps)


def _drafts(tpl, n=600):
    rng = np.random.default_rng(3)
    return [_draft(k, tpl, rng, pull_wrong=0.8, other_wrong=0.08) for k in range(n)]


def test_failures_concentrated_on_one_primitive_fail_the_text_gate_and_thinning_fixes_it(cfg, tpl):
    drafts = _drafts(tpl)
    report, problems = _gate_report(cfg, tpl, drafts)
    cell = report["cells"][0]
    assert cell["checked"] and any("text_classifier" in p for p in problems), report
    spec = StepBalance(max_chi2=6.63, min_support=20, keep_at_least=0.4)
    kept = balance(copy.deepcopy(drafts), spec)
    assert 0.4 * len(drafts) <= len(kept) < len(drafts)
    report, problems = _gate_report(cfg, tpl, kept)
    assert report["cells"][0]["checked"] and problems == [], report
    assert report["cells"][0]["wrong_share"] > 0.05  # the wrong steps are thinned, not removed
    pull = [st["label"] for d in kept for st in d["steps"] if st["fields"].get("primitive") == "Pull"]
    rest = [
        st["label"]
        for d in kept
        for st in d["steps"]
        if st["kind"] == "primitive" and st["fields"]["primitive"] != "Pull"
    ]
    assert abs(pull.count(-1) / len(pull) - rest.count(-1) / len(rest)) < 0.1


def test_thinning_keeps_the_floor_and_is_a_no_op_without_a_spec(tpl):
    drafts = _drafts(tpl, n=200)
    assert balance(drafts, None) == drafts
    kept = balance(drafts, StepBalance(max_chi2=1e-6, min_support=1, keep_at_least=0.9))
    assert len(kept) == 180  # the floor stops it before the (unreachable) statistic
    assert [d["key"] for d in kept] == sorted(d["key"] for d in kept)  # order kept
    feats = step_features(drafts[0]["steps"][5], 5, 6)
    assert "kind=action_outcome:True" in feats and "action=Pick gear." in feats and "end=0" in feats


def _action_draft(tpl, target_on_outcome=True):
    lab, ir = reassemble_tables()
    acts = items.reassemble_actions("r1", "cam", lab, ir, tpl)
    return {
        "source": "reassemble",
        "unit_id": "r1",
        "camera": "cam",
        "split": "eval",
        "eval_level": "L1",
        "steps": acts[0] + acts[1],
    }


def test_an_action_failure_claim_is_planted_at_the_dealt_target_within_its_budget(tpl):
    d = _action_draft(tpl)
    assert [s["kind"] for s in d["steps"]][4] == "action_outcome"
    before = copy.deepcopy(d["steps"])
    assert not perturb.outcome_flipped(copy.deepcopy(d), 3, {"tpl": tpl})  # the target is a primitive
    assert perturb.outcome_flipped(d, 4, {"tpl": tpl})
    wrong = [(i, s["error"]) for i, s in enumerate(d["steps"]) if s["label"] == -1]
    assert wrong == [(4, "outcome_flipped")] and d["steps"][4]["claim"] is False
    assert [s["frames"] for s in d["steps"]] == [s["frames"] for s in before]  # the frames stay
    # the budget: no true failure claim, so none may be wrong at a share of 0.15; four true ones allow one
    claims = perturb.FailureClaims(0.15, 0)
    assert not perturb.outcome_flipped(_action_draft(tpl), 4, {"tpl": tpl, "claims": claims})
    claims = perturb.FailureClaims(0.2, 4)
    assert perturb.outcome_flipped(_action_draft(tpl), 4, {"tpl": tpl, "claims": claims})
    assert claims.wrong == 1 and not perturb.outcome_flipped(_action_draft(tpl), 4, {"tpl": tpl, "claims": claims})


def test_a_reassemble_action_is_never_truncated_into_a_shorter_item(tpl):
    d = _action_draft(tpl)
    for target in range(len(d["steps"])):
        assert not perturb.truncated_complete(copy.deepcopy(d), target, {"tpl": tpl, "donors": {}})


def test_candidates_holding_a_recorded_failure_are_picked_first(tpl):
    import polars as pl

    fails = {("r1", 0, 1)}
    lab, ir = reassemble_tables(uids=("r1",), success_low=fails)
    # six high-level actions, the first with a failed primitive: cap 1 keeps a candidate holding it
    lab["primitives"] = pl.concat(
        [
            lab["primitives"].with_columns(
                (pl.col("parent_index") + 2 * k).alias("parent_index"),
                (pl.col("start_frame") + 240 * k),
                (pl.col("end_frame") + 240 * k),
            )
            for k in range(3)
        ]
    )
    lab["segments"] = pl.concat(
        [
            lab["segments"].with_columns(
                (pl.col("seg_index") + 2 * k).alias("seg_index"),
                (pl.col("start_frame") + 240 * k),
                (pl.col("end_frame") + 240 * k),
            )
            for k in range(3)
        ]
    )
    ir["segments"] = pl.concat(
        [ir["segments"].with_columns((pl.col("parent_index") + 2 * k).alias("parent_index")) for k in range(3)]
    )
    units = pl.DataFrame(
        {"unit_id": ["r1"], "camera": ["cam"], "num_frames": [720], "outcome": [None]},
        schema_overrides={"outcome": pl.String},
    )
    one = tpl.model_copy(update={"cap_per_unit": 1})
    for seed in range(5):
        picked = items.build_drafts("reassemble", units, lab, ir, one, 10, seed)
        assert len(picked) == 1 and items.holds_failure(picked[0]), seed


def test_the_ends_of_two_actions_swap_their_frames_where_planted(tpl):
    d = _action_draft(tpl)
    ends = [i for i, st in enumerate(d["steps"]) if st["kind"] == "action_outcome"]
    before = copy.deepcopy(d["steps"])
    assert ends == [4, 9] and perturb.swapped_frames(d, 4, {"tpl": tpl})
    changed = [i for i, (a, b) in enumerate(zip(before, d["steps"])) if a["frames"] != b["frames"]]
    assert changed == ends and [d["steps"][i]["error"] for i in changed] == ["swapped_frames"] * 2
    assert [d["steps"][i]["label"] for i in changed] == [-1, -1]
    assert all(a["label"] == b["label"] for i, (a, b) in enumerate(zip(before, d["steps"])) if i not in ends)
