"""The T13 step track's items (pipeline/steps/): steps per source from synthetic label tables, labels (1 / -1 / 0),
natural errors from the sources' own failure records, every injected error kind labelled exactly where it was planted,
the row contract, and the split side of each unit taken from the MCQ split's groups."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest

from factories import reassemble_tables
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


def test_steps_of_overlapping_runs_show_frames_apart(tpl):
    # contact runs with the windows of phase runs: before placement their steps show the same frames
    same = [(False, 30, 69), (True, 70, 109), (False, 110, 299)]
    lab, ir, unit = timeline_tables(contact_runs=same)
    kinds = ["phase", "contact", "outcome"]
    raw = items.timeline_steps("rh20t", "u1", "cam", lab, tpl, kinds)
    assert _shared_frames(raw, tpl.min_frame_gap)
    d = _timeline_draft(tpl, same)  # the unit's whole timeline, then its closing step
    assert not _shared_frames(d["steps"], tpl.min_frame_gap)
    steps = d["steps"]
    assert len(steps) == len(raw) + 1  # every step kept (and the closing one), each frame inside its own window
    assert all(st["window"][0] <= f <= st["window"][1] for st in steps for f in st["frames"])
    scored = [st for st in steps if st["label"] != 0]
    assert len(scored) == sum(st["label"] != 0 for st in raw) + 1  # away from the runs' ends, as before
    # a window with no room left: its step is left out rather than shown beside another
    tight = [items.make_step("phase", (10, 14), tpl, fields={"phase": p}, unit_id="u", camera="c") for p in "ab"]
    assert len(items.place_frames(tight, tpl)) == 1


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
    # 9 timeline steps, windows of 4-10 of them int(10 x shift) apart, and the unit's closing item
    assert starts[1.0] == ["u1/0000", "u1/closing"] and starts[0.5] == ["u1/0000", "u1/0005", "u1/closing"]
    assert starts[0.2] == [f"u1/{a:04d}" for a in (0, 2, 4)] + ["u1/closing"]


def test_the_outcome_closes_one_item_after_the_units_first_steps(tpl):
    lab, ir, unit = timeline_tables(outcome="failure")
    drafts = items.unit_drafts("rh20t", unit, lab, ir, tpl, ["phase", "contact", "outcome"])
    closing = [d for d in drafts if any(st["kind"] == "outcome" for st in d["steps"])]
    assert [d["key"] for d in closing] == ["u1/closing"]
    (d,) = closing
    tl = items.timeline_steps("rh20t", "u1", "cam", lab, tpl, ["phase", "contact", "outcome"])
    assert [st["window"] for st in d["steps"][:-1]] == [st["window"] for st in tl[: tpl.closing_after]]
    assert d["steps"][-1]["kind"] == "outcome" and d["steps"][-1]["truth"] is False


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
    """The unit's longest window, then its outcome step (as the closing item ends): the perturbations on a whole
    process. Frames as unit_drafts places them."""
    lab, ir, unit = timeline_tables(contact_runs=contact_runs)
    drafts = items.unit_drafts("rh20t", unit, lab, ir, tpl, ["phase", "contact", "outcome"])
    closing = next(d for d in drafts if d["key"].endswith("/closing"))
    d = max((d for d in drafts if d is not closing), key=lambda d: len(d["steps"]))
    d["steps"] = d["steps"] + [closing["steps"][-1]]
    d.update(split="eval", eval_level="L1", split_group_id="g1")
    return d


def _first_contact(d: dict) -> int:
    """The first correct contact step of a draft: a site every injected kind but the closing ones can take."""
    return next(i for i, s in enumerate(d["steps"]) if s["kind"] == "contact" and s["label"] == 1)


@pytest.mark.parametrize("kind", ["swapped_frames", "contact_flipped", "outcome_flipped", "truncated_complete"])
def test_a_planted_error_is_labelled_where_it_was_planted(tpl, kind):
    d = _timeline_draft(tpl)
    if kind == "truncated_complete":  # a window of the timeline that ends before the record does
        d["steps"] = d["steps"][:5] + d["steps"][-1:]
    before = copy.deepcopy(d["steps"])
    closing = kind in ("outcome_flipped", "truncated_complete")
    # the site: the closing step, or a step of the kind the error lives on (a contact step for contact_flipped)
    target = len(before) - 1 if closing else _first_contact(d)
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


def _shared_frames(steps: list[dict], gap: int = 4) -> set:
    """(unit, frame) pairs of two steps closer than `gap` frames (T13's min_frame_gap)."""
    shown = [(i, st["unit_id"], f) for i, st in enumerate(steps) for f in st["frames"]]
    return {(u, f, g) for i, u, f in shown for j, v, g in shown if i < j and u == v and abs(f - g) < gap}


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
    ctx = {"tpl": tpl, "donors": {}}
    sites = [i for i, s in enumerate(d["steps"]) if s["kind"] == "contact"]
    site = next(i for i in sites if perturb.contact_flipped(copy.deepcopy(d), i, ctx))  # one the frames leave room at
    assert perturb.contact_flipped(d, site, ctx)
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
    # 20 frames: two frames away from the ends and min_frame_gap from the two its own step shows
    longer = _timeline_draft(tpl, [(False, 60, 79), (True, 80, 99)])
    assert any(perturb.contact_flipped(copy.deepcopy(longer), t, {"tpl": tpl, "donors": {}}) for t in range(9))


def test_inject_draws_sites_per_step_and_spreads_kinds(tpl):
    drafts = []
    for k in range(60):
        d = _timeline_draft(tpl)
        if k % 2:  # half the windows end before the record does (truncated_complete keeps the length)
            d["steps"] = d["steps"][:5] + d["steps"][-1:]
        d["key"] = f"u1/{k:04d}"
        drafts.append(d)
    free_steps = sum(perturb._free(st) for d in drafts for st in d["steps"])
    # no budgets, and a higher rate than the release's: each closing kind gets sites among 60 items
    free = tpl.model_copy(update={"max_wrong_share": 1.0, "failure_claims_wrong_share": None, "error_rate": 0.3})
    report = perturb.inject(drafts, free, SEED, "rh20t")
    used = report["injected"]
    # every correct step is a site error_rate of the time (some sites drawn take no error: `missed`)
    drawn = (sum(used.values()) + sum(report["missed"].values())) / free_steps
    assert abs(drawn - free.error_rate) < 0.06, drawn
    assert used["substituted_chain"] == 0 and min(used[k] for k in ("swapped_frames", "contact_flipped")) >= 5
    assert min(used[k] for k in ("outcome_flipped", "truncated_complete")) >= 1
    assert all(isinstance(d["injected"], list) for d in drafts)
    assert 0 < report["clean_or_natural_only"] < len(drafts)
    # the closing step is wrong about as often as any other step: no more than twice the rate
    assert sum(d["steps"][-1]["label"] == -1 for d in drafts) / len(drafts) < 2 * free.error_rate
    firsts = {perturb.first_error_index(d["steps"]) for d in drafts if d["injected"]}
    assert len(firsts) >= 3  # error positions spread over the step indices


def test_an_injected_kind_stays_within_its_share_of_a_step_kind(tpl):
    drafts = []
    for k in range(60):
        d = _timeline_draft(tpl)
        d["key"] = f"u1/{k:04d}"
        drafts.append(d)
    share = 0.05
    contact = sum(st["kind"] == "contact" and st["label"] != 0 for d in drafts for st in d["steps"])
    report = perturb.inject(drafts, tpl.model_copy(update={"max_wrong_share": share}), SEED, "rh20t")
    flipped = sum(st["error"] == "contact_flipped" for d in drafts for st in d["steps"])
    assert 0 < flipped <= share * contact and report["injected"]["contact_flipped"] == flipped
    for kind in ("phase", "contact"):  # two swapped steps per item, each within the budget of its kind
        n = sum(st["kind"] == kind and st["label"] != 0 for d in drafts for st in d["steps"])
        assert (
            sum(st["kind"] == kind and st["error"] == "swapped_frames" for d in drafts for st in d["steps"])
            <= share * n
        )
    # at 1.0 the same items take many more
    again = [_timeline_draft(tpl) for _ in range(60)]
    for k, d in enumerate(again):
        d["key"] = f"u1/{k:04d}"
    perturb.inject(again, tpl.model_copy(update={"max_wrong_share": 1.0}), SEED, "rh20t")
    assert sum(st["error"] == "contact_flipped" for d in again for st in d["steps"]) > flipped


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
