"""The T13 step track's items (pipeline/steps/): steps per source from synthetic label tables, labels (1 / -1 / 0),
natural errors from the sources' own failure records, every injected error kind labelled exactly where it was planted,
the row contract, and the split side of each unit taken from the MCQ split's groups."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest

from pipeline.settings.config import load_settings
from pipeline.steps import items, perturb
from pipeline.steps.rows import STEP_MODEL_FACING, row_problems, step_rows
from pipeline.steps.stage import group_sides

SEED = 7


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(scope="module")
def tpl(cfg):
    return cfg.step_tasks["T13"]


def _runs(spec: list[tuple], n: int) -> list:
    out = [None] * n
    for v, s, e in spec:
        out[s : e + 1] = [v] * (e - s + 1)
    return out


CONTACT_RUNS = [(False, 0, 69), (True, 70, 219), (False, 220, 299)]


def timeline_tables(
    uid: str = "u1", n: int = 300, outcome: str = "success", contact_runs=None
) -> tuple[dict, dict, dict]:
    """An RH20T-like unit: phases and one arm's contact in runs (`contact_runs`: (state, first, last)), a rated
    outcome."""
    phases = _runs(
        [
            ("pre-approach", 0, 29),
            ("approach", 30, 69),
            ("contact", 70, 109),
            ("hold and carry", 110, 169),
            ("transfer", 170, 219),
            ("release", 220, 299),
        ],
        n,
    )
    contact = _runs(contact_runs or CONTACT_RUNS, n)
    frames = pl.DataFrame(
        {"unit_id": [uid] * n, "frame_index": list(range(n)), "phase": phases, "coord": [None] * n},
        schema_overrides={"coord": pl.String},
    )
    arms = pl.DataFrame(
        {
            "unit_id": [uid] * n,
            "arm": ["single"] * n,
            "frame_index": list(range(n)),
            "contact": contact,
            "active": [None] * n,
        },
        schema_overrides={"active": pl.Boolean},
    )
    lab = {"frames": frames, "arms": arms}
    unit = {"unit_id": uid, "camera": "cam", "num_frames": n, "outcome": outcome}
    return lab, {}, unit


def reassemble_tables(uids=("r1", "r2"), success_low=None) -> tuple[dict, dict]:
    """REASSEMBLE-like units: two high-level actions each, four primitives each (r2's chain of 'Pick gear.' differs
    from r1's at position 2)."""
    prim, segs, low = [], [], []
    for uid in uids:
        chains = {
            0: ("Pick gear.", ["Approach", "Grasp", "Lift", "Release"]),
            1: ("Insert gear.", ["Approach", "Align", "Push", "Release"]),
        }
        if uid != uids[0]:
            chains[0] = ("Pick gear.", ["Approach", "Grasp", "Twist", "Release"])
        f = 0
        for h, (text, chain) in chains.items():
            hs = f
            for j, p in enumerate(chain):
                prim.append(
                    {
                        "unit_id": uid,
                        "parent_index": h,
                        "seg_index": j,
                        "text": p,
                        "start_frame": f,
                        "end_frame": f + 29,
                    }
                )
                ok = not (success_low and (uid, h, j) in success_low)
                low.append({"unit_id": uid, "level": "low", "parent_index": h, "seg_index": j, "success": ok})
                f += 30
            segs.append(
                {
                    "unit_id": uid,
                    "seg_index": h,
                    "text": text,
                    "no_action": False,
                    "start_frame": hs,
                    "end_frame": f - 1,
                    "success": True,
                }
            )
    lab = {"primitives": pl.DataFrame(prim), "segments": pl.DataFrame(segs)}
    ir = {"segments": pl.DataFrame(low)}
    return lab, ir


def _diff(before: list[dict], after: list[dict]) -> list[int]:
    keys = ("frames", "claim", "unit_id", "window")
    return [i for i, (a, b) in enumerate(zip(before, after)) if any(a[k] != b[k] for k in keys)]


# ------------------------------------------------------------------------------------------- steps and labels
def test_timeline_steps_follow_the_label_runs(tpl):
    lab, ir, unit = timeline_tables()
    steps = items.timeline_steps("rh20t", "u1", "cam", lab, tpl, ["phase", "contact", "outcome"])
    assert [s["window"][0] for s in steps] == sorted(s["window"][0] for s in steps)
    for st in steps:  # every step's 1-2 frames inside its own window
        assert 1 <= len(st["frames"]) <= 2 and all(st["window"][0] <= f <= st["window"][1] for f in st["frames"])
    idle = [s for s in steps if s["kind"] == "phase" and s["fields"]["phase"] == "pre-approach"]
    assert idle and all(s["label"] == 0 for s in idle)  # idle segments are neutral
    contact = [s for s in steps if s["kind"] == "contact"]
    assert [s["truth"] for s in contact] == [False, True, False]


def test_a_step_near_a_label_change_is_neutral(tpl):
    short = items.make_step("phase", (10, 12), tpl, fields={"phase": "approach"}, unit_id="u", camera="c")
    long = items.make_step("phase", (10, 60), tpl, fields={"phase": "approach"}, unit_id="u", camera="c")
    assert short["label"] == 0 and long["label"] == 1 and len(long["frames"]) == 2


def test_a_smaller_window_shift_gives_a_unit_more_items(tpl):
    lab, ir, unit = timeline_tables()
    kinds = ["phase", "contact", "outcome"]
    starts = {
        shift: [
            d["key"]
            for d in items.unit_drafts("rh20t", unit, lab, ir, tpl.model_copy(update={"window_shift": shift}), kinds)
        ]
        for shift in (0.5, 0.2, 1.0)
    }
    # 9 timeline steps, windows of 3-9 of them (the closing outcome step makes 4-10): int(9 x shift) apart
    assert starts[1.0] == ["u1/0000"] and starts[0.5] == ["u1/0000", "u1/0004"]
    assert starts[0.2] == [f"u1/{a:04d}" for a in range(7)]


def test_natural_errors_come_from_the_records(tpl):
    lab, ir = reassemble_tables(success_low={("r1", 0, 1)})
    acts = items.reassemble_actions("r1", "cam", lab, ir, tpl)
    grasp = acts[0][1]
    assert grasp["value"] == "Grasp" and grasp["label"] == -1 and grasp["error"] == "natural_primitive_failure"
    assert [s["kind"] for s in acts[0]] == ["primitive"] * 4 + ["action_outcome"]
    # RH20T: a failed rating stated as a success is natural_outcome, stated as a failure it is correct
    lab, ir, unit = timeline_tables(outcome="failure")
    end = items.outcome_step("u1", "cam", 300, "failure", tpl)
    items.set_claim(end, True, "natural_outcome")
    assert (end["label"], end["error"]) == (-1, "natural_outcome")
    items.set_claim(end, False, "natural_outcome")
    assert (end["label"], end["error"]) == (1, None)


# ------------------------------------------------------------------------------------------- injected errors
def _timeline_draft(tpl, contact_runs=None) -> dict:
    lab, ir, unit = timeline_tables(contact_runs=contact_runs)
    drafts = items.unit_drafts("rh20t", unit, lab, ir, tpl, ["phase", "contact", "outcome"])
    d = max(drafts, key=lambda d: len(d["steps"]))
    d.update(split="eval", eval_level="L1", split_group_id="g1")
    return d


@pytest.mark.parametrize("kind", ["swapped_frames", "contact_flipped", "outcome_flipped", "truncated_complete"])
def test_a_planted_error_is_labelled_where_it_was_planted(tpl, kind):
    d = _timeline_draft(tpl)
    if kind == "truncated_complete":  # a window of the timeline that ends before the record does
        d["steps"] = d["steps"][:5] + d["steps"][-1:]
    before = copy.deepcopy(d["steps"])
    closing = kind in ("outcome_flipped", "truncated_complete")
    target = len(before) - 1 if closing else 2
    if closing:  # the closing outcome step takes an error only where the dealt position is its own
        assert not perturb.KINDS[kind](copy.deepcopy(d), 2, {"tpl": tpl, "donors": {}})
    assert perturb.KINDS[kind](d, target, {"tpl": tpl, "donors": {}})
    after = d["steps"]
    if kind == "truncated_complete":  # an RH20T process keeps its length: the window ends before the record
        assert len(after) == len(before)
        assert [s["error"] for s in after[:-1]] == [s["error"] for s in before[: len(after) - 1]]
        last = after[-1]
        assert (last["label"], last["error"], last["claim"]) == (-1, kind, True)
        assert last["window"][1] < before[-1]["window"][0]  # shown before the end
        return
    changed = _diff(before, after)
    assert changed and len(changed) == (2 if kind == "swapped_frames" else 1)
    for i, (a, b) in enumerate(zip(before, after)):
        if i in changed:
            assert (b["label"], b["error"]) == (-1, kind), (i, b)
        else:
            assert (a["label"], a["error"]) == (b["label"], b["error"])


def _shared_frames(steps: list[dict]) -> set:
    seen, shared = set(), set()
    for st in steps:
        for key in {(st["unit_id"], f) for f in st["frames"]}:
            (shared if key in seen else seen).add(key)
    return shared


# contact runs that share no window with a phase run: no two steps of the drafted item show the same frame
DISJOINT_CONTACT = [(False, 0, 58), (True, 59, 224), (False, 225, 299)]


@pytest.mark.parametrize("kind", ["swapped_frames", "contact_flipped", "outcome_flipped", "truncated_complete"])
def test_no_error_kind_makes_two_steps_show_the_same_frame(tpl, kind):
    d = _timeline_draft(tpl, DISJOINT_CONTACT)
    # and windows that end before the record does
    drafts = [d, *({**d, "steps": d["steps"][:k] + d["steps"][-1:]} for k in (4, 5))]
    assert not any(_shared_frames(x["steps"]) for x in drafts)
    applied = 0
    for x in drafts:
        for target in range(len(x["steps"])):
            y = copy.deepcopy(x)
            if perturb.KINDS[kind](y, target, {"tpl": tpl, "donors": {}}):
                applied += 1
                assert not _shared_frames(y["steps"]), (kind, target, _shared_frames(y["steps"]))
    assert applied
    if kind == "truncated_complete":  # the frames right after step 4 (110, ...) hold 114, which step 3 shows
        assert drafts[2]["steps"][3]["window"] == (59, 224) and 114 in drafts[2]["steps"][3]["frames"]
        assert not perturb.truncated_complete(copy.deepcopy(drafts[2]), 5, {"tpl": tpl, "donors": {}})


def test_a_flipped_contact_shows_other_frames_of_the_opposite_run(tpl):
    d = _timeline_draft(tpl, DISJOINT_CONTACT)
    before = copy.deepcopy(d["steps"])
    assert perturb.contact_flipped(d, 2, {"tpl": tpl, "donors": {}})
    (i,) = _diff(before, d["steps"])
    st = d["steps"][i]
    runs = [o for o in before if o["kind"] == "contact" and o["truth"] != st["truth"]]
    run = next(o for o in runs if o["window"] == st["window"])  # a run of the opposite state ...
    lo, hi = run["window"][0] + tpl.neutral_margin, run["window"][1] - tpl.neutral_margin
    assert all(lo <= f <= hi for f in st["frames"]) and len(st["frames"]) == len(run["frames"])
    assert not set(st["frames"]) & set(run["frames"])  # ... but not the frames its own step shows
    # opposite runs too short to hold frames no step shows (5 frames: the middle one is the only one not neutral, and
    # its own step shows it): the item does not take the kind
    short = _timeline_draft(tpl, [(False, 60, 64), (True, 65, 69)])
    contact = [s for s in short["steps"] if s["kind"] == "contact"]
    assert [(s["window"], s["label"]) for s in contact] == [((60, 64), 1), ((65, 69), 1)]
    assert not any(
        perturb.contact_flipped(copy.deepcopy(short), t, {"tpl": tpl, "donors": {}}) for t in range(len(short["steps"]))
    )
    longer = _timeline_draft(tpl, [(False, 60, 65), (True, 66, 71)])  # 6 frames: one more frame that is not neutral
    assert perturb.contact_flipped(longer, 0, {"tpl": tpl, "donors": {}})


def test_a_substituted_chain_is_labelled_where_the_primitives_differ(tpl):
    lab, ir = reassemble_tables()
    units = pl.DataFrame(
        {"unit_id": ["r1", "r2"], "camera": ["cam", "cam"], "split": ["eval", "eval"], "eval_level": ["L1", "L1"]}
    )
    from pipeline.steps.stage import _donor_chains

    donors = perturb.donors_of(_donor_chains("reassemble", units, lab, ir, tpl))
    acts = items.reassemble_actions("r1", "cam", lab, ir, tpl)
    d = {
        "source": "reassemble",
        "unit_id": "r1",
        "camera": "cam",
        "split": "eval",
        "eval_level": "L1",
        "steps": acts[0] + acts[1],
    }
    before = copy.deepcopy(d["steps"])
    assert perturb.substituted_chain(d, 0, {"tpl": tpl, "donors": donors})
    wrong = [i for i, s in enumerate(d["steps"]) if s["label"] == -1]
    assert wrong == [2] and d["steps"][2]["error"] == "substituted_chain"  # Lift vs r2's Twist
    assert {s["unit_id"] for s in d["steps"][:4]} == {"r2"} and d["steps"][2]["fields"] == before[2]["fields"]
    # a donor on the other side of the split is never used (isolation)
    units = units.with_columns(pl.Series("split", ["eval", "sft"]))
    donors = perturb.donors_of(_donor_chains("reassemble", units, lab, ir, tpl))
    d["steps"] = copy.deepcopy(before)
    assert not perturb.substituted_chain(d, 0, {"tpl": tpl, "donors": donors})


def test_inject_keeps_a_share_clean_and_spreads_kinds(tpl):
    drafts = []
    for k in range(60):
        d = _timeline_draft(tpl)
        if k % 2:  # half the windows end before the record does (truncated_complete keeps the length)
            d["steps"] = d["steps"][:5] + d["steps"][-1:]
        d["key"] = f"u1/{k:04d}"
        drafts.append(d)
    report = perturb.inject(drafts, tpl, SEED, "rh20t")
    clean = report["clean_or_natural_only"] / len(drafts)
    assert abs(clean - tpl.share_clean) < 0.2
    used = report["injected"]
    assert used["substituted_chain"] == 0 and min(used[k] for k in ("swapped_frames", "contact_flipped")) >= 5
    assert min(used[k] for k in ("outcome_flipped", "truncated_complete")) >= 1
    # the closing step is wrong no more often than a dealt position is the last one (not half the time)
    assert sum(d["steps"][-1]["label"] == -1 for d in drafts) / len(drafts) < 0.3
    firsts = {perturb.first_error_index(d["steps"]) for d in drafts if d["injected"]}
    assert len(firsts) >= 3  # error positions spread over the step indices


# ------------------------------------------------------------------------------------------- rows
def _rows(cfg, tpl, drafts):
    units = {("rh20t", "u1"): {"task_id": "task_0001", "unit_type": "recording", "licence": "CC BY-NC 4.0"}}
    hashes = {("rh20t", "u1", "cam", f): f"{f:064x}" for f in range(300)}
    return step_rows(drafts, units, hashes, tpl, cfg)


def test_rows_keep_the_contract_and_say_nothing_of_the_errors(cfg, tpl):
    drafts = []
    for k, kind in enumerate(["swapped_frames", "contact_flipped", "outcome_flipped", "truncated_complete", None]):
        d = _timeline_draft(tpl)
        d["key"] = f"u1/{k:04d}"
        if kind == "truncated_complete":
            d["steps"] = d["steps"][:5] + d["steps"][-1:]
        if kind:
            closing = kind in ("outcome_flipped", "truncated_complete")
            assert perturb.KINDS[kind](d, len(d["steps"]) - 1 if closing else 1, {"tpl": tpl, "donors": {}})
        drafts.append(d)
    rows = _rows(cfg, tpl, drafts)
    for r in rows.iter_rows(named=True):
        assert row_problems(r) == []
        facing = json.dumps({c: r[c] for c in STEP_MODEL_FACING}) + json.dumps(r["response"]["steps"])
        for word in ("swap", "substitut", "flip", "truncat", "natural", "inject"):
            assert word not in facing.lower()
        kinds = json.loads(r["step_error_kinds_json"])
        assert [k is not None for k in kinds] == [v == -1 for v in r["response"]["process_correctness"]]
        assert r["image"][0] == f"images/{r['item_id']}_0.png" and r["item_id"].startswith("pb_v2_steps_eval_")
    # a broken row is refused, with the item named
    bad = rows.row(0, named=True)
    bad["first_error_index"] = 99
    assert any("first_error_index" in p for p in row_problems(bad))


def test_wording_variants_are_dealt_in_turn(cfg, tpl):
    drafts = []
    for k in range(8):
        d = _timeline_draft(tpl)
        d["key"] = f"u1/{k:04d}"
        drafts.append(d)
    rows = _rows(cfg, tpl, drafts)
    texts = [s for r in rows["response"].to_list() for s in r["steps"]]
    pos = [t for t in texts if t.startswith("The gripper is") and "not" not in t and "nothing" not in t]
    variants = {v.format(arm="The gripper") for v in tpl.sentences["contact"]["positive"]}
    assert {t for t in pos} == variants and abs(sum(t == sorted(variants)[0] for t in pos) * 2 - len(pos)) <= 1


# ------------------------------------------------------------------------------------------- split side
def test_units_take_their_groups_side_and_ungrouped_units_get_none():
    split_items = pl.DataFrame(
        {
            "source": ["rh20t"] * 3,
            "split_group_id": ["g1", "g1", "g2"],
            "split": ["eval", "eval", "sft"],
            "eval_level": ["L2", "L3", None],
        }
    )
    groups = pl.DataFrame(
        {"source": ["rh20t"] * 4, "unit_id": ["a", "b", "c", "d"], "split_group_id": ["g1", "g1", "g2", "g9"]}
    )
    sides = group_sides(split_items, groups).sort("unit_id")
    assert sides.select("unit_id", "split", "eval_level").rows() == [
        ("a", "eval", "L2"),
        ("b", "eval", "L2"),
        ("c", "sft", None),
    ]
    with pytest.raises(ValueError, match="both sides"):
        group_sides(split_items.with_columns(pl.Series("split", ["eval", "sft", "sft"])), groups)


def test_drafts_and_errors_are_deterministic(cfg, tpl):
    lab, ir, unit = timeline_tables()
    lab2, ir2, unit2 = timeline_tables("u2")
    lab = {k: pl.concat([lab[k], lab2[k]]) for k in lab}
    lab["units"] = pl.DataFrame({"unit_id": ["u1", "u2"], "outcome": ["success", "failure"]})
    units = pl.DataFrame(
        {
            "unit_id": ["u1", "u2"],
            "camera": ["cam"] * 2,
            "num_frames": [300] * 2,
            "outcome": ["success", "failure"],
            "split": ["eval", "sft"],
            "eval_level": ["L1", None],
            "split_group_id": ["g1", "g2"],
        }
    )

    def run(seed):
        drafts = items.build_drafts("rh20t", units, lab, {}, tpl, 6, seed)
        items.set_outcome_wording(drafts, tpl, seed, "rh20t")
        perturb.inject(drafts, tpl, seed, "rh20t")
        return [(d["key"], [(s["frames"], s["label"], s["error"], s["claim"]) for s in d["steps"]]) for d in drafts]

    assert run(SEED) == run(SEED)
    assert run(SEED) != run(SEED + 1)
