"""REASSEMBLE's step items: a successful action last in an item shows its chain cut where the source's failures cut
theirs (so a chain's length and last primitive do not tell a failure), a failed action is never followed by another,
an action's failure claim is wrong no more often than the configured share, a REASSEMBLE action never takes a
truncation that would shorten its item, and a substituted primitive shows another recording's frames of a primitive
that differs."""

from __future__ import annotations

import copy

import polars as pl
import pytest

from factories import reassemble_plan_tables
from factories import reassemble_tables
from pipeline.settings.config import load_settings
from pipeline.steps import items, perturb


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(scope="module")
def tpl(cfg):
    return cfg.step_tasks["T13"]


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


def _chain(steps: list[dict]) -> list[str]:
    return [st["value"] if st["kind"] == "primitive" else "END" for st in steps]


def test_a_successful_chain_is_cut_where_failures_cut_theirs(tpl):
    lab, ir = reassemble_tables(uids=("r1",), success_low={("r1", 0, 1)})  # r1's pick fails at its Grasp
    lab["segments"] = lab["segments"].with_columns(pl.Series("success", [False, True]))
    acts = items.reassemble_actions("r1", "cam", lab, ir, tpl)
    cuts = items.failure_chains(acts)
    assert cuts == {("Approach", "Grasp", "Lift", "Release")}  # the failed action's whole chain (a made-up one)
    # a failed action is shown whole, its failed primitive wrong; a successful one whose chain begins like a failed
    # one is cut to that prefix, then its end step
    assert _chain(items.shown_action(acts[0], cuts)) == ["Approach", "Grasp", "Lift", "Release", "END"]
    ok = [dict(st) for st in acts[0]]
    ok[-1]["truth"] = True
    longer = ok[:-1] + [{**ok[0], "value": "Twist"}, ok[-1]]
    assert _chain(items.shown_action(longer, cuts)) == ["Approach", "Grasp", "Lift", "Release", "END"]
    assert _chain(items.shown_action(acts[1], cuts)) == ["Approach", "Align", "Push", "Release", "END"]  # no match


def test_on_planned_recordings_cut_chains_end_as_failed_ones_do(tpl):
    """The sample planner's recordings: a failed Pick ends at its Grasp, a failed Insert before its Release; the
    successful actions last in an item end the same way, and a failed action is only ever last."""
    lab, ir, units = reassemble_plan_tables(6, seed=2)
    drafts = items.build_drafts("reassemble", units, lab, ir, tpl, 10**6, 3)
    ends = {"failed": set(), "ok": set()}
    for d in drafts:
        acts = [[st for st in d["steps"] if st.get("action") == a] for a in sorted({st["action"] for st in d["steps"]})]
        last = acts[-1]
        verb = last[-1]["fields"]["action"].split()[0]
        ends["failed" if last[-1]["truth"] is False else "ok"].add((verb, tuple(_chain(last))))
        assert all(a[-1]["truth"] is not False for a in acts[:-1])  # a failed action is never followed
        assert all(lo["label"] == -1 for lo in last[-2:-1] if last[-1]["truth"] is False)  # its failed primitive
    # every failed chain, as shown, is also shown for successful actions of the same verb; none ends with Lift or
    # Release (the planner's failures stop before them), and successful ones mostly do not either
    assert ends["failed"] and ends["failed"] <= ends["ok"], ends["failed"] - ends["ok"]
    assert not any(c[-2] in ("Lift", "Release") for _, c in ends["failed"])
    picks = [c for v, c in ends["ok"] if v == "Pick"]
    assert sum(c[-2] == "Grasp" for c in picks) > sum(c[-2] == "Lift" for c in picks)


def test_a_substituted_primitive_shows_another_recordings_different_primitive(tpl):
    lab, ir = reassemble_tables()
    units = pl.DataFrame(
        {"unit_id": ["r1", "r2"], "camera": ["cam", "cam"], "split": ["eval", "eval"], "eval_level": ["L1", "L1"]}
    )
    from pipeline.steps.stage import _donor_chains

    donors = perturb.donors_of(_donor_chains("reassemble", units, lab, ir, tpl))
    d = _action_draft(tpl)
    before = copy.deepcopy(d["steps"])
    ctx = {"tpl": tpl, "donors": donors, "rng": None}
    assert perturb.substituted_chain(d, 1, ctx)
    changed = [i for i, (a, b) in enumerate(zip(before, d["steps"])) if a != b]
    assert changed == [1]  # the step at the target, alone
    st = d["steps"][1]
    assert (st["label"], st["error"], st["unit_id"]) == (-1, "substituted_chain", "r2")
    assert st["fields"] == before[1]["fields"]  # the sentence stays
    r2 = [c for c in donors["Pick gear."] if c["unit_id"] == "r2"][0]["chain"]
    shown = next(o for o in r2 if o["frames"] == st["frames"])
    assert shown["value"] != before[1]["value"]  # frames of a primitive that differs: Approach, not Grasp
    # only recordings on the same side of the split are donors (isolation)
    units = units.with_columns(pl.Series("split", ["eval", "sft"]))
    donors = perturb.donors_of(_donor_chains("reassemble", units, lab, ir, tpl))
    assert not perturb.substituted_chain(_action_draft(tpl), 1, {**ctx, "donors": donors})


def test_the_ends_of_two_actions_swap_their_frames_where_planted(tpl):
    d = _action_draft(tpl)
    ends = [i for i, st in enumerate(d["steps"]) if st["kind"] == "action_outcome"]
    before = copy.deepcopy(d["steps"])
    assert ends == [4, 9]
    swaps = {}
    for u in (k / 20 for k in range(20)):  # every draw from a primitive site: the partner it falls on
        x = copy.deepcopy(d)
        assert perturb.swapped_frames(x, 0, {"tpl": tpl, "u": u})
        changed = tuple(i for i, (a, b) in enumerate(zip(before, x["steps"])) if a["frames"] != b["frames"])
        assert changed[0] == 0 and before[changed[1]]["kind"] == "primitive"  # a partner of the site's kind
        swaps[changed] = x
    assert len(swaps) > 2  # many partners drawn
    x = copy.deepcopy(d)  # an action's end swaps with the other action's end, its only partner
    assert perturb.swapped_frames(x, ends[0], {"tpl": tpl, "u": 0.5})
    swaps[tuple(ends)] = x
    x = swaps[tuple(ends)]
    assert [x["steps"][i]["error"] for i in ends] == ["swapped_frames"] * 2
    assert [x["steps"][i]["label"] for i in ends] == [-1, -1]
    assert all(a["label"] == b["label"] for i, (a, b) in enumerate(zip(before, x["steps"])) if i not in ends)
