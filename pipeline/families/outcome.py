"""T7 Operation Outcome Prediction: frames of an attempt, answer = its eventual success.

RH20T: the attempt is the whole episode (labels units.outcome from the rating); REASSEMBLE: every high-level action
segment (success from the annotation). Frames at `relative` fractions of the attempt's stable sub-range
(`margin_ratio`, `min_margin`), RH20T's windows shifted by each of `shifts`.

Two variants (configs/tasks/T7.yaml):
- recognition (default, `until_decisive: true`): the last fraction is the decisive moment, the end of the attempt
  (REASSEMBLE's segment end; RH20T's IR holds no failure time, so the episode end), so the outcome is visible;
  RH20T's `shifts` move the earlier frames only.
- public forecast (`variant: public`): early fractions only (the public release's frames end by 42 % of the scene).

`windows_per_unit` (RH20T): every unit used gives exactly that many windows (a unit that cannot is left out), so a
unit's row count cannot carry its label. `same_task_pools`: success and failure come in equal numbers from the same
tasks and scenes, so neither the task nor the scene shown gives the answer; the rest is left out, and the selection
reports the family's quota shortfall (a warning with the figures) rather than fill the quota with the common label:
- RH20T (unit outcomes): per source task, as many success as failure units (the first of each, in unit order);
- REASSEMBLE (segment outcomes; 92.5 % of the release-scale sample's segments succeed): each failed segment is paired
  with one successful segment of the same task (the segment's text) in the same scene (the recording), else of the
  same task in another scene, else of another task in the same scene (`same_task_segments`)."""

from __future__ import annotations

from collections import Counter, defaultdict

from .common import Pool, Rule, Spec, evenly, relative_frames
from .context import Context

_LABEL = {True: "success", False: "failure"}


def same_task_units(outcome: dict[str, str | None], task: dict[str, str], unit_ids: list[str]) -> list[str]:
    """Per task: min(#success, #failure) units of each outcome, the first in unit order (others left out)."""
    by_task: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"success": [], "failure": []})
    for uid in unit_ids:
        o = outcome.get(uid)
        if o in ("success", "failure"):
            by_task[str(task.get(uid) or "")][o].append(uid)
    keep: list[str] = []
    for task in sorted(by_task):
        s, f = by_task[task]["success"], by_task[task]["failure"]
        m = min(len(s), len(f))
        keep += s[:m] + f[:m]
    return sorted(keep)


def same_task_segments(rows: list[tuple[str, int, str, str]]) -> set[tuple[str, int]]:
    """Success/failure pairs over segments [(unit, seg_index, task, label)]: the (unit, seg_index) of the segments
    kept, as many "success" as "failure". Pairs are matched at (task, unit), then task, then unit; within a group each
    row of the scarcer label (in (unit, seg_index) order) takes the other label's row closest in segment order in its
    own unit, else the first in (unit, seg_index) order. Deterministic; other labels are left out."""
    free = {lab: sorted((u, i, t) for u, i, t, lab_ in rows if lab_ == lab) for lab in ("success", "failure")}
    keep: set[tuple[str, int]] = set()
    for key in (lambda u, t: (t, u), lambda u, t: t, lambda u, t: u):
        groups: dict = defaultdict(lambda: {"success": [], "failure": []})
        for lab, lst in free.items():
            for u, i, t in lst:
                groups[key(u, t)][lab].append((u, i))
        for g in sorted(groups, key=str):
            s, f = groups[g]["success"], groups[g]["failure"]
            few, many = (s, f) if len(s) <= len(f) else (f, s)
            for u, i in few:  # never more than `many`
                j = min(range(len(many)), key=lambda k, u=u, i=i: (many[k][0] != u, abs(many[k][1] - i), k))
                keep |= {(u, i), many.pop(j)}
        free = {lab: [r for r in lst if r[:2] not in keep] for lab, lst in free.items()}
    return keep


def _segment_rows(
    segs: list[dict], n: int, fracs, margin_ratio, min_margin, min_step, rules: tuple[Rule, Rule]
) -> dict[str, list]:
    """{label: [(key, label, frames, meta)]} of one unit's labelled action segments (REASSEMBLE); `rules` count the
    action segments without an outcome and the outcome segments too short for the frames."""
    found: dict[str, list] = {}
    unlabelled, short = rules
    for s in segs:
        if s["no_action"]:
            continue
        unlabelled.count(1, s["success"] is None)
        if s["success"] is None:
            continue
        f = relative_frames(int(s["start_frame"]), int(s["end_frame"]), fracs, margin_ratio, min_margin, min_step)
        short.count(1, f is None or f[-1] >= n)
        if f is None or f[-1] >= n:
            continue
        lab = _LABEL[bool(s["success"])]
        found.setdefault(lab, []).append((f"h{s['seg_index']}", lab, f, {"segment": int(s["seg_index"])}))
    return found


def _window_rows(
    unit: dict, n: int, shifts, decisive: bool, fracs, margin_ratio, min_margin, min_step
) -> dict[str, list]:
    """{outcome: [(key, outcome, frames, meta)]} of one unit's shifted windows (RH20T: the unit's outcome)."""
    outcome = unit.get("outcome")
    found: dict[str, list] = {}
    if outcome not in ("success", "failure"):
        return found  # excluded ratings (-1, missing) never make T7 items
    for k, sh in enumerate(shifts):
        moved = [p + float(sh) for p in fracs]
        if decisive:  # the last frame stays on the decisive moment; the shift moves the others
            moved[-1] = fracs[-1]
        f = relative_frames(0, n - 1, moved, margin_ratio, min_margin, min_step)
        if f is None or f[-1] >= n:
            continue
        found.setdefault(outcome, []).append((f"w{k}", outcome, f, {"window": k, "rating": unit.get("rating")}))
    return found


def _paired_segments(ctx: Context, per: list[tuple[str, list, bool]], rule: Rule) -> list[tuple[str, list, bool]]:
    """`per` with only the segments that `same_task_segments` pairs (rows of whole units kept); `rule` counts the
    segments left unpaired, by label."""
    text = {(s["unit_id"], int(s["seg_index"])): str(s["text"]) for segs in ctx.segments.values() for s in segs}
    seg_rows = [
        (uid, meta["segment"], text[(uid, meta["segment"])], lab)
        for uid, rows, _ in per
        for _, lab, _, meta in rows
        if "segment" in meta
    ]
    keep = same_task_segments(seg_rows)
    if seg_rows:
        rule.count(len(seg_rows), len(seg_rows) - len(keep), Counter(r[3] for r in seg_rows if r[:2] not in keep))
    return [
        (uid, [x for x in rows if "segment" not in x[3] or (uid, x[3]["segment"]) in keep], first)
        for uid, rows, first in per
    ]


def t7_outcome(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    fcfg = spec.frames
    geom = (
        [float(x) for x in fcfg["relative"]],
        float(fcfg.get("margin_ratio", 0.0)),
        int(fcfg.get("min_margin", 0)),
        int(fcfg.get("min_step", 1)),
    )
    per_unit = fcfg.get("windows_per_unit")
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    same = bool(fcfg.get("same_task_pools"))
    unit_ids, units = ctx.unit_ids, f"{spec.unit_word}s"
    outcome_at = f"labels.outcome.{spec.source}"
    # whole units (RH20T): the unit's outcome; segments (REASSEMBLE): each high-level action's
    whole = [u for u in unit_ids if not ctx.segments.get(u)] if fcfg.get("shifts") is not None else []
    outcome = {u: ctx.units[u].get("outcome") for u in whole}
    rated = [u for u in whole if outcome[u] in ("success", "failure")]
    if whole:  # excluded ratings (-1, missing) never make T7 items
        spec.rule("outcome", "", units, "had no success or failure rating", setting=outcome_at).count(
            len(whole), len(whole) - len(rated)
        )
    if same and rated:  # whole units: paired per task here; segments: paired below
        task = dict(zip(ctx.ir["units"]["unit_id"].to_list(), ctx.ir["units"]["task_id"].to_list()))
        kept = set(same_task_units(outcome, task, whole))
        spec.rule(
            "same_task_pools",
            "frames.same_task_pools",
            f"rated {units}",
            f"had no {spec.unit_word} of the other outcome in the same task to be paired with",
        ).count(len(rated), len(rated) - len(kept), Counter(outcome[u] for u in rated if u not in kept))
        unit_ids = [u for u in unit_ids if ctx.segments.get(u) or u in kept]
    elif same:
        unit_ids = [u for u in unit_ids if ctx.segments.get(u)]
    seg_rules = (
        spec.rule("outcome", "", "action segments", "had no success annotation", setting=outcome_at),
        spec.rule(
            "frames",
            "frames.relative",
            "outcome segments",
            f"had too few frames to show {len(geom[0])} at least {geom[3]} apart",
        ),
    )
    capped = spec.cap_rule(cap, "outcome segments")
    few = spec.rule("windows_per_unit", "frames.windows_per_unit", units, f"had room for fewer than {per_unit} windows")
    per: list[tuple[str, list, bool]] = []  # (unit, rows, anchor on the first frame) in unit order
    for uid in unit_ids:
        n = ctx.n(uid)
        if ctx.segments.get(uid):
            found = _segment_rows(ctx.segments[uid], n, *geom, seg_rules)
        elif fcfg.get("shifts") is not None:
            if outcome[uid] not in ("success", "failure"):
                continue
            found = _window_rows(ctx.units[uid], n, fcfg["shifts"], bool(fcfg.get("until_decisive")), *geom)
        else:
            continue
        if per_unit is not None:
            rows = [x for lab in sorted(found) for x in found[lab]]
            lacking = len(rows) < int(per_unit)
            few.count(1, lacking, {outcome[uid]: 1} if lacking and uid in outcome else None)
            if len(rows) >= int(per_unit):  # fewer windows than every unit gives: left out, not short
                per.append((uid, evenly(rows, int(per_unit)), True))
        else:
            rows = []
            for lab in sorted(found):
                kept_rows = evenly(found[lab], cap)
                if capped is not None:
                    capped.count(len(found[lab]), len(found[lab]) - len(kept_rows))
                rows += kept_rows
            per.append((uid, rows, False))
    if same:
        pairing = spec.rule(
            "same_task_pools",
            "frames.same_task_pools",
            "outcome segments",
            f"had no segment of the other outcome to be paired with in the same task or {spec.unit_word}",
        )
        per = _paired_segments(ctx, per, pairing)
    for uid, rows, first in per:
        for key, lab, f, meta in rows:
            pool.add(uid, key, lab, f, f[0] if first else f[len(f) // 2], meta=meta)
    return pool.frame()
