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
unit's row count cannot carry its label; `same_task_pools`: per source task, as many success as failure units are used
(the first of each, in unit order), so the two labels come from the same tasks and scenes."""

from __future__ import annotations

from collections import defaultdict

from .common import Pool, Spec, evenly, relative_frames
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


def t7_outcome(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    fcfg = spec.frames
    fracs = [float(x) for x in fcfg["relative"]]
    margin_ratio, min_margin = float(fcfg.get("margin_ratio", 0.0)), int(fcfg.get("min_margin", 0))
    min_step = int(fcfg.get("min_step", 1))
    per_unit = fcfg.get("windows_per_unit")
    decisive = bool(fcfg.get("until_decisive"))
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    unit_ids = ctx.unit_ids
    if fcfg.get("same_task_pools"):
        task = dict(zip(ctx.ir["units"]["unit_id"].to_list(), ctx.ir["units"]["task_id"].to_list()))
        unit_ids = same_task_units({u: ctx.units[u].get("outcome") for u in unit_ids}, task, unit_ids)
    for uid in unit_ids:
        n = ctx.n(uid)
        found: dict[str, list] = {}
        if ctx.segments.get(uid):
            for s in ctx.segments[uid]:
                if s["no_action"] or s["success"] is None:
                    continue
                f = relative_frames(int(s["start_frame"]), int(s["end_frame"]), fracs, margin_ratio, min_margin,
                                    min_step)
                if f is None or f[-1] >= n:
                    continue
                lab = _LABEL[bool(s["success"])]
                found.setdefault(lab, []).append((f"h{s['seg_index']}", lab, f, {"segment": int(s["seg_index"])}))
        elif fcfg.get("shifts") is not None:
            outcome = ctx.units[uid].get("outcome")
            if outcome not in ("success", "failure"):
                continue  # excluded ratings (-1, missing) never make T7 items
            for k, sh in enumerate(fcfg["shifts"]):
                moved = [p + float(sh) for p in fracs]
                if decisive:  # the last frame stays on the decisive moment; the shift moves the others
                    moved[-1] = fracs[-1]
                f = relative_frames(0, n - 1, moved, margin_ratio, min_margin, min_step)
                if f is None or f[-1] >= n:
                    continue
                found.setdefault(outcome, []).append((f"w{k}", outcome, f, {"window": k,
                                                                             "rating": ctx.units[uid].get("rating")}))
        if per_unit is not None:
            rows = [x for lab in sorted(found) for x in found[lab]]
            if len(rows) < int(per_unit):
                continue  # fewer windows than every unit gives: left out, not short
            for key, lab_, f, meta in evenly(rows, int(per_unit)):
                pool.add(uid, key, lab_, f, f[0], meta=meta)
            continue
        for lab in sorted(found):
            for key, lab_, f, meta in evenly(found[lab], cap):
                pool.add(uid, key, lab_, f, f[len(f) // 2], meta=meta)
    return pool.frame()
