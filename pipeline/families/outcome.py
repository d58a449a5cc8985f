"""T7 Operation Outcome Prediction: early frames of an attempt, answer = its eventual success.

RH20T: the attempt is the whole episode (labels units.outcome from the rating); windows of early frames at
`relative` fractions of the episode, each window shifted by `shifts`. REASSEMBLE: every high-level action segment
(success from the annotation), frames at `relative` fractions of its stable sub-range."""

from __future__ import annotations

from .common import Pool, Spec, evenly, relative_frames
from .context import Context

_LABEL = {True: "success", False: "failure"}


def t7_outcome(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    fcfg = spec.frames
    fracs = [float(x) for x in fcfg["relative"]]
    margin_ratio, min_margin = float(fcfg.get("margin_ratio", 0.0)), int(fcfg.get("min_margin", 0))
    min_step = int(fcfg.get("min_step", 1))
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    for uid in ctx.unit_ids:
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
                f = relative_frames(0, n - 1, [p + float(sh) for p in fracs], margin_ratio, min_margin, min_step)
                if f is None or f[-1] >= n:
                    continue
                found.setdefault(outcome, []).append((f"w{k}", outcome, f, {"window": k,
                                                                             "rating": ctx.units[uid].get("rating")}))
        for lab in sorted(found):
            for key, lab_, f, meta in evenly(found[lab], cap):
                pool.add(uid, key, lab_, f, f[len(f) // 2], meta=meta)
    return pool.frame()
