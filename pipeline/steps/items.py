"""Step items of the process-verification track (T13): per source, ordered steps drawn from what the labels stage
derived (phase, contact, per-arm activity, coordination per frame; REASSEMBLE's high-level actions and low-level
primitives with their `success` flags; RH20T's rated outcome), each tied to 1-2 frames inside its own window, with
its label: 1 (the sentence is true of its frames), -1 (false: here only the sources' own failure records, the
"natural" errors) or 0 (neutral: idle segments, frames within `neutral_margin` of a label change).

A step is a dict:
    kind      step kind (configs/tasks/T13.yaml sentences): primitive, action_outcome, phase, contact, outcome,
              activity, coordination
    fields    the template fields ({primitive}, {action}, {phase}, {arm}, {coord})
    truth     true/false kinds: the derived state (contact, activity, the recorded outcome); else None
    claim     true/false kinds: what the sentence states (the truth, unless an error says otherwise); else None
    unit_id, camera, window (first, last frame), frames (1-2 frame indices inside the window; place_frames keeps the
              frames of a unit's steps `min_frame_gap` apart, so no two steps of an item show the same image)
    label     1 / -1 / 0; error: null or an error kind (STEP_ERROR_KINDS)
    idle, natural, pinned   what the label rule reads again when place_frames moves the frames (an idle segment, the
              natural error of a recorded failure, a closing step labelled 1 whatever its frames)
Injected errors are pipeline/steps/perturb.py's; the release rows pipeline/steps/rows.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..families.common import label_runs
from pipeline.core.seeding import rng as rng_for

if TYPE_CHECKING:
    from pipeline.settings.steps import StepTaskFile

NATURAL = ("natural_primitive_failure", "natural_action_failure", "natural_outcome")
INJECTED = ("swapped_frames", "substituted_chain", "contact_flipped", "outcome_flipped", "truncated_complete")
STEP_ERROR_KINDS = NATURAL + INJECTED
TRUE_FALSE_KINDS = ("action_outcome", "contact", "outcome", "activity")


def step_frames(window: tuple[int, int], tpl: StepTaskFile) -> list[int]:
    """1 frame (the window's middle) or 2 (at 1/3 and 2/3) when the window holds `two_frames_from` frames."""
    s, e = int(window[0]), int(window[1])
    n = e - s + 1
    if tpl.frames_per_step.max >= 2 and n >= tpl.two_frames_from:
        return [s + n // 3, s + (2 * n) // 3]
    return [s + (n - 1) // 2]


def near_change(frames: list[int], window: tuple[int, int], margin: int) -> bool:
    """A frame within `margin` frames of the window's ends (a label change) makes the step neutral."""
    return any(f - window[0] < margin or window[1] - f < margin for f in frames)


def make_step(
    kind: str,
    window: tuple[int, int],
    tpl: StepTaskFile,
    *,
    fields: dict | None = None,
    truth=None,
    unit_id: str,
    camera: str,
    idle: bool = False,
    natural: str | None = None,
    **extra,
) -> dict:
    frames = step_frames(window, tpl)
    step = {
        "kind": kind,
        "fields": dict(fields or {}),
        "truth": truth,
        "claim": truth,
        "unit_id": unit_id,
        "camera": camera,
        "window": (int(window[0]), int(window[1])),
        "frames": frames,
        "label": 1,
        "error": None,
        "idle": bool(idle),
        "natural": natural,
        "pinned": False,
        **extra,
    }
    _label(step, tpl)
    return step


def _label(step: dict, tpl: StepTaskFile) -> None:
    """The label of a step from its frames: 0 for an idle segment or a frame near a label change, -1 for a recorded
    failure, else 1 (a pinned closing step: 1 whatever its frames)."""
    if step["pinned"]:
        step["label"], step["error"] = 1, None
    elif step["idle"] or near_change(step["frames"], step["window"], int(tpl.neutral_margin)):
        step["label"], step["error"] = 0, None
    elif step["natural"] is not None:
        step["label"], step["error"] = -1, step["natural"]
    else:
        step["label"], step["error"] = 1, None


def pin(step: dict) -> dict:
    """A closing step (the end of the record or of an action): labelled 1 whatever its frames."""
    step["pinned"] = True
    step["label"], step["error"] = 1, None
    return step


def too_close(frames, unit_id: str, taken, gap: int) -> bool:
    """Some frame of `frames` (of unit `unit_id`) lies less than `gap` frames from a (unit, frame) of `taken`."""
    return any(u == unit_id and abs(int(f) - int(g)) < gap for f in frames for u, g in taken)


def place_frames(steps: list[dict], tpl: StepTaskFile) -> list[dict]:
    """The frames of one unit's steps, so that no two steps show frames less than `min_frame_gap` apart (steps of
    overlapping runs - a phase and a contact run - would otherwise show the same image, and only correct ones: a model
    that answers "correct" for an image it has seen before would score). Steps are placed shortest window first, the
    pinned closing steps (whose label does not depend on their frames) after the others; each frame is the free one
    nearest to where step_frames puts it, away from the window's ends by `neutral_margin` where the window allows
    (else anywhere in it: the step is then neutral). A two-frame step with room for one shows one; a step with no
    free frame is left out. Returns the steps kept, in their order (labels updated)."""
    gap, margin = int(tpl.min_frame_gap), int(tpl.neutral_margin)
    taken: list[int] = []

    def rank(i: int) -> tuple:
        (s, e), pinned = steps[i]["window"], steps[i]["pinned"]
        return pinned, e - s, s, e

    keep = set()
    for i in sorted(range(len(steps)), key=rank):
        st = steps[i]
        s, e = st["window"]
        pad = 0 if st["pinned"] else margin
        picked: list[int] = []
        for want in step_frames((s, e), tpl):
            free = [f for f in range(s + pad, e - pad + 1) if all(abs(f - t) >= gap for t in taken + picked)]
            if free:
                picked.append(min(free, key=lambda f: (abs(f - want), f)))
        if not picked:  # no room away from the ends: one frame anywhere in the window (the step is neutral)
            want = step_frames((s, e), tpl)[0]
            free = [f for f in range(s, e + 1) if all(abs(f - t) >= gap for t in taken)]
            picked = [min(free, key=lambda f: (abs(f - want), f))] if free else []
        if picked:
            st["frames"] = sorted(picked)
            taken += picked
            _label(st, tpl)
            keep.add(i)
    return [st for i, st in enumerate(steps) if i in keep]


def set_claim(step: dict, claim: bool, natural: str | None = None) -> None:
    """State `claim` in a true/false step and label it against the truth (a false claim of a recorded failure is the
    natural error `natural`)."""
    step["claim"] = bool(claim)
    if step["label"] == 0:
        return
    ok = step["claim"] == step["truth"]
    step["label"], step["error"] = (1, None) if ok else (-1, natural)


# ------------------------------------------------------------------------------------------- per-source steps
def _arm_name(arm: str, kind: str) -> str:
    if kind == "contact":
        return "The gripper" if arm == "single" else f"The {arm} gripper"
    return arm


def _frame_runs(frames: pl.DataFrame, col: str, min_len: int) -> list[tuple]:
    """(value, first frame, last frame) of each run of equal non-null values at least `min_len` frames long."""
    idx = frames["frame_index"].to_list()
    return [(v, idx[a], idx[b - 1]) for a, b, v in label_runs(frames[col].to_list()) if b - a >= min_len]


def timeline_steps(slug: str, uid: str, camera: str, lab: dict, tpl: StepTaskFile, kinds: list[str]) -> list[dict]:
    """Runs of the per-frame labels as steps in time order (phase, contact and activity per arm, coordination)."""
    m = int(tpl.min_run_frames)
    fr = lab["frames"].filter(pl.col("unit_id") == uid).sort("frame_index")
    arms = lab["arms"].filter(pl.col("unit_id") == uid).sort("arm", "frame_index")
    idle_phases = set(tpl.idle_phases)
    out = []
    if "phase" in kinds:
        for v, s, e in _frame_runs(fr, "phase", m):
            out.append(
                make_step(
                    "phase",
                    (s, e),
                    tpl,
                    fields={"phase": v},
                    unit_id=uid,
                    camera=camera,
                    idle=v in idle_phases,
                    value=v,
                )
            )
    if "coordination" in kinds:
        for v, s, e in _frame_runs(fr, "coord", m):
            out.append(
                make_step(
                    "coordination",
                    (s, e),
                    tpl,
                    fields={"coord": tpl.coordination_text[v]},
                    unit_id=uid,
                    camera=camera,
                    idle=v == "both_idle",
                    value=v,
                )
            )
    for kind, col in (("contact", "contact"), ("activity", "active")):
        if kind not in kinds:
            continue
        for arm in sorted(set(arms["arm"].to_list())):
            a = arms.filter(pl.col("arm") == arm)
            for v, s, e in _frame_runs(a, col, m):
                out.append(
                    make_step(
                        kind,
                        (s, e),
                        tpl,
                        fields={"arm": _arm_name(arm, kind)},
                        truth=bool(v),
                        unit_id=uid,
                        camera=camera,
                        value=f"{arm}:{bool(v)}",
                    )
                )
    order = {k: i for i, k in enumerate(kinds)}
    return sorted(out, key=lambda st: (st["window"][0], order[st["kind"]], st["fields"].get("arm", "")))


def outcome_step(
    uid: str, camera: str, num_frames: int, outcome: str | None, tpl: StepTaskFile, at: int | None = None
) -> dict | None:
    """The closing step: the recorded outcome, shown by the unit's last frames (or those from frame `at`)."""
    if outcome not in ("success", "failure"):
        return None
    w = int(tpl.two_frames_from)
    s = max(0, num_frames - w) if at is None else int(at)
    e = min(num_frames - 1, s + w - 1)
    step = make_step("outcome", (s, e), tpl, truth=outcome == "success", unit_id=uid, camera=camera)
    return pin(step)  # the end of the record: no later label change to be near


def reassemble_actions(uid: str, camera: str, lab: dict, ir: dict, tpl: StepTaskFile) -> list[list[dict]]:
    """One list of steps per high-level action of a REASSEMBLE unit: its low-level chain (each primitive with its
    own `success`), then the action's outcome step (its `success`), shown by the action's last frames; the frames of
    all the unit's steps placed apart (place_frames). An action left without its end step or its chain is left out."""
    prims = lab["primitives"].filter(pl.col("unit_id") == uid).sort("parent_index", "seg_index")
    segs = ir["segments"].filter((pl.col("unit_id") == uid) & (pl.col("level") == "low"))
    ok = {(int(p), int(s)): v for p, s, v in segs.select("parent_index", "seg_index", "success").iter_rows()}
    highs = lab["segments"].filter((pl.col("unit_id") == uid) & ~pl.col("no_action")).sort("seg_index")
    out = []
    for h in highs.iter_rows(named=True):
        chain = prims.filter(pl.col("parent_index") == h["seg_index"])
        if not chain.height:
            continue
        steps = []
        for p in chain.iter_rows(named=True):
            good = ok.get((int(p["parent_index"]), int(p["seg_index"])))
            steps.append(
                make_step(
                    "primitive",
                    (p["start_frame"], p["end_frame"]),
                    tpl,
                    fields={"primitive": p["text"], "action": h["text"]},
                    unit_id=uid,
                    camera=camera,
                    idle=p["text"].lower().startswith("no action"),
                    natural=None if good is not False else "natural_primitive_failure",
                    value=p["text"],
                    action=int(h["seg_index"]),
                )
            )
        w = int(tpl.two_frames_from)
        he = int(h["end_frame"])
        end = make_step(
            "action_outcome",
            (max(int(h["start_frame"]), he - w + 1), he),
            tpl,
            fields={"action": h["text"]},
            truth=h["success"] is not False,
            unit_id=uid,
            camera=camera,
            action=int(h["seg_index"]),
        )
        steps.append(pin(end))  # the action's end, not a label change inside the step
        out.append(steps)
    kept = {id(st) for st in place_frames([st for a in out for st in a], tpl)}
    out = [[st for st in a if id(st) in kept] for a in out]
    return [a for a in out if len(a) > 1 and a[-1]["kind"] == "action_outcome"]


def failed(action: list[dict]) -> bool:
    """A REASSEMBLE action recorded as failed (its end step's truth)."""
    return action[-1]["truth"] is False


def chain_of(action: list[dict]) -> tuple[str, ...]:
    return tuple(st["value"] for st in action if st["kind"] == "primitive")


def failure_chains(actions: list[list[dict]]) -> set[tuple[str, ...]]:
    """The primitive chains of the actions recorded as failed: where a failure cuts a chain (a failed primitive ends
    its action in REASSEMBLE's records)."""
    return {chain_of(a) for a in actions if failed(a)}


def shown_action(action: list[dict], cuts: set[tuple[str, ...]]) -> list[dict]:
    """An action as the last one of an item: a failed action whole (its chain ends at the failed primitive); a
    successful one with its chain cut to the longest prefix that is the chain of some failed action (`cuts`), then
    its end step, so a chain's length and last primitive do not tell a failure (a successful Pick shows Approach,
    Grasp and its end as a failed one does; without the cut, "the chain ends before Lift or Release" marks every
    failure). A chain no failure matches is shown whole."""
    if failed(action):
        return action
    chain = chain_of(action)
    cut = max((k for k in range(1, len(chain)) if chain[:k] in cuts), default=len(chain))
    return action[:cut] + [action[-1]]


# ------------------------------------------------------------------------------------------- drafts
def _windows(n: int, lo: int, hi: int, stride: int) -> list[tuple[int, int]]:
    """Slices [a, b) of n timeline steps with lo <= b - a <= hi, a stepping by `stride`."""
    out = []
    for a in range(0, max(0, n - lo) + 1, stride):
        b = min(n, a + hi)
        if b - a >= lo:
            out.append((a, b))
    return out


def unit_drafts(
    slug: str, unit: dict, lab: dict, ir: dict, tpl: StepTaskFile, kinds: list[str], cuts: set | None = None
) -> list[dict]:
    """Every candidate item of one unit (before the per-unit cap). REASSEMBLE: one per high-level action, that action
    last (shown_action, `cuts`: failure_chains of the source), after the whole previous action when it succeeded and
    the item stays within `steps.max`, else alone; a failed action is never followed by another (the next action
    would tell the failure: after a failed pick the robot picks again). Other sources: windows of the unit's
    timeline (and its closing outcome step), `window_shift` x the longest window apart."""
    uid, camera = unit["unit_id"], unit["camera"]
    lo, hi = int(tpl.steps.min), int(tpl.steps.max)
    base = {"source": slug, "unit_id": uid, "camera": camera}
    out = []
    if "primitive" in kinds:
        acts = reassemble_actions(uid, camera, lab, ir, tpl)
        for i, a in enumerate(acts):
            last = shown_action(a, cuts or set())
            pair = acts[i - 1] + last if i and not failed(acts[i - 1]) else None
            for n, steps in ((2, pair), (1, last)):
                if steps is not None and lo <= len(steps) <= hi:
                    out.append({**base, "key": f"{uid}/{i:04d}/{n}", "steps": [dict(s) for s in steps]})
                    break
        return out
    tl = timeline_steps(slug, uid, camera, lab, tpl, kinds)
    outcome = unit.get("outcome") if "outcome" in kinds else None
    closing = outcome_step(uid, camera, int(unit["num_frames"]), outcome, tpl)
    placed = place_frames(tl + ([closing] if closing else []), tpl)
    if closing is not None:
        closing = placed.pop() if placed and placed[-1] is closing else None
    tl = placed
    base["runs"] = [dict(s) for s in tl if s["kind"] == "contact"]  # contact_flipped shows frames of any of them
    shift = max(1, int(hi * float(tpl.window_shift)))
    for a, b in _windows(len(tl), lo, hi, shift):
        out.append({**base, "key": f"{uid}/{a:04d}", "steps": [dict(s) for s in tl[a:b]], "outcome": outcome})
    k = int(tpl.closing_after)
    if closing is not None and len(tl) >= k and lo <= k + 1 <= hi:
        # the outcome closes one item of the unit, after its first steps only: later steps tell a failed scene
        # (no contact run after a missed grasp, no release phase after a drop), and a closing claim after them
        # would be judged from the text
        steps = [dict(s) for s in tl[:k]] + [dict(closing)]
        out.append({**base, "key": f"{uid}/closing", "steps": steps, "outcome": outcome})
    return out


def build_drafts(
    slug: str,
    units: pl.DataFrame,
    lab: dict,
    ir: dict,
    tpl: StepTaskFile,
    quota: int,
    seed: int,
    stats: dict | None = None,
) -> list[dict]:
    """A source's draft items: every unit's candidates, at most `cap_per_unit` per unit (a seeded draw that never
    looks at a candidate's labels: taking recorded failures first would make the contexts they occur in tell them),
    then `quota` items dealt over the units in turn (seeded order), each unit's in its drawn order (not the time
    order: a quota that takes one item per unit would take only the units' first windows), so as many units as
    possible are covered. `units`
    carries unit_id, camera, num_frames, outcome (labels units table) and the unit's split columns. `stats` (a dict)
    receives the pool's figures: candidates (every unit's), after_cap, actions (REASSEMBLE), steps (timeline steps
    of the units, other sources)."""
    kinds = tpl.for_source(slug).step_kinds or []
    cap = int(tpl.for_source(slug).cap_per_unit)
    cuts = None
    if "primitive" in kinds:  # REASSEMBLE: where the source's failures cut a chain, over all its units
        cuts = set()
        for unit in units.iter_rows(named=True):
            cuts |= failure_chains(reassemble_actions(unit["unit_id"], unit["camera"], lab, ir, tpl))
    per_unit, n_cands = [], 0
    for unit in units.sort("unit_id").iter_rows(named=True):
        cands = unit_drafts(slug, unit, lab, ir, tpl, kinds, cuts)
        n_cands += len(cands)
        rng = rng_for(seed, "steps_select", f"{slug}/{unit['unit_id']}")
        order = rng.permutation(len(cands)).tolist()
        # in the drawn order, a unit's closing item (its outcome step) first: every unit's outcome is stated once
        order.sort(key=lambda i: not cands[i]["key"].endswith("/closing"))
        picked = [cands[i] for i in order[:cap]]
        for d in picked:
            d.update(
                {
                    k: unit[k]
                    for k in ("split", "eval_level", "split_group_id", "unit_type", "task_id", "licence")
                    if k in unit
                }
            )
        per_unit.append(picked)
    order = rng_for(seed, "steps_units", slug).permutation(len(per_unit)) if per_unit else []
    out, depth = [], 0
    while len(out) < quota and any(depth < len(p) for p in per_unit):
        for i in order:
            if depth < len(per_unit[i]) and len(out) < quota:
                out.append(per_unit[i][depth])
        depth += 1
    if stats is not None:
        stats.update(candidates=n_cands, after_cap=sum(len(p) for p in per_unit))
    return sorted(out, key=lambda d: d["key"])


def set_outcome_wording(drafts: list[dict], tpl: StepTaskFile, seed: int, slug: str) -> None:
    """A recorded failure is stated as a failure (label 1) `outcome_failure_wording` of the time, else as a success
    (the natural error): so the failure wording is not only ever an injected error."""
    rng = rng_for(seed, "steps_outcome_wording", slug)
    share = float(tpl.for_source(slug).outcome_failure_wording)
    for d in drafts:
        for st in d["steps"]:
            if st["kind"] in ("outcome", "action_outcome") and st["truth"] is False:
                natural = "natural_outcome" if st["kind"] == "outcome" else "natural_action_failure"
                set_claim(st, rng.random() >= share, natural)
