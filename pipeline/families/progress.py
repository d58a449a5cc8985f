"""T5 Primitive-local Progress: early / middle / late inside the current local step.

Two frame rules (configs/tasks/T5.yaml `frames`):
- step view (default, `strip`): the item shows the named step itself: `strip` frames spanning the step from its first
  to its last frame, labelled 1..strip in time order, then the query frame, labelled NOW. The question names the step
  (`step_name`: REASSEMBLE's high-level action text, GM-100's gripper contact step, RH20T's interaction run), and
  the step is the one the key's progress is measured in (labels.steps). A step whose boundaries are uncertain is
  skipped with a reason (`step_skip_reason`): shorter than `min_step_sec`, or within `edge_margin_sec` of the
  unit's first or last frame (the recording may have cut it).
- public (`offsets`, `variant: public`): five frames around the query, all inside the step, step neither named nor
  bounded (the public release's design: 0.4 s of a 6-7 s step).

Anchors every `stride` frames where the progress label is set, at most `cap_per_label` per unit and label."""

from __future__ import annotations

import numpy as np

from .common import Pool, Spec, evenly, render_spec, rnd, stride_anchors
from .context import Context
from .framewise import _anchors, _params

NOW = "NOW"


def step_skip_reason(
    start: int, end: int, n: int, fps: float, min_step_sec: float, edge_margin_sec: float
) -> str | None:
    """Why a step's boundaries are uncertain (None = usable): the template key of the rule it fails, `min_step_sec`
    (too short) or `edge_margin_sec` (touching the unit's edges, where the recording may have cut it)."""
    if (end - start) / fps < min_step_sec:
        return "min_step_sec"
    edge = int(round(edge_margin_sec * fps))
    if start < edge or end > n - 1 - edge:
        return "edge_margin_sec"
    return None


def strip_frames(start: int, end: int, k: int) -> list[int]:
    """k frames spanning [start, end] (inclusive) evenly, start and end included."""
    return [int(round(start + i * (end - start) / (k - 1))) for i in range(k)]


def _is_step(x) -> bool:
    return x is not None and not (isinstance(x, float) and np.isnan(x))


def t5_progress(spec: Spec, ctx: Context):
    if "strip" in spec.frames:
        return _t5_step_view(spec, ctx)
    return _t5_public(spec, ctx)


def _t5_step_view(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    fc = spec.frames
    k, qgap = int(fc["strip"]), int(fc.get("query_min_gap") or 0)
    min_sec, edge_sec = float(fc.get("min_step_sec") or 0.0), float(fc.get("edge_margin_sec") or 0.0)
    stride = int(spec.cand("stride", 1))
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    name = str(spec.get("step_name") or "{text}")
    labels = [str(i + 1) for i in range(k)] + [NOW]
    # steps with uncertain boundaries are skipped (step_skip_reason), each rule counted over the steps it looked at
    rules = {
        "min_step_sec": spec.rule("min_step_sec", "frames.min_step_sec", "steps", f"lasted less than {min_sec} s"),
        "edge_margin_sec": spec.rule(
            "edge_margin_sec",
            "frames.edge_margin_sec",
            "steps",
            f"lay within {edge_sec} s of the {spec.unit_word}'s first or last frame (may be cut)",
        ),
        "strip": spec.rule("strip", "frames.strip", "steps", f"spanned fewer than the {k} frames of the strip"),
    }
    near = spec.rule("query_min_gap", "frames.query_min_gap", "query frames", f"lay within {qgap} frames of the strip")
    capped = spec.cap_rule(cap, "query frames")
    for uid in ctx.unit_ids:
        fr, st = ctx.frames.get(uid), ctx.steps.get(uid)
        if fr is None or st is None:
            continue
        n, fps = ctx.n(uid), ctx.fps(uid)
        for j in range(len(st["step_id"])):
            sid, s, e = int(st["step_id"][j]), int(st["start_frame"][j]), int(st["end_frame"][j])
            why = step_skip_reason(s, e, n, fps, min_sec, edge_sec)
            if why is None and e - s + 1 < k:
                why = "strip"
            for rule, r in rules.items():  # each rule looks at the steps the ones before it kept
                r.count(1, why == rule)
                if why == rule:
                    break
            if why is not None:
                continue
            strip = strip_frames(s, e, k)
            per_label: dict[str, list[int]] = {}
            for a in stride_anchors(s, e + 1, 0, stride):
                lab, at = fr["progress"][a], fr["step_id"][a]
                if lab is None or not _is_step(at) or int(at) != sid:
                    continue
                close = min(abs(a - f) for f in strip) < max(1, qgap)
                near.count(1, close)
                if close:
                    continue
                per_label.setdefault(lab, []).append(a)
            text = str(st["text"][j] or "").rstrip(".")
            step = name.format(text=text, arm_pattern=st["arm_pattern"][j] or "")
            for lab in sorted(per_label):
                kept = evenly(per_label[lab], cap)
                if capped is not None:
                    capped.count(len(per_label[lab]), len(per_label[lab]) - len(kept))
                for a in kept:
                    f = [*strip, a]
                    pool.add(
                        uid,
                        f"s{sid}|f{a}",
                        lab,
                        f,
                        a,
                        qfields={"step": step},
                        render=render_spec(spec, f, labels),
                        meta={"step_id": sid, "u": rnd(fr["step_u"][a]), "step": [s, e]},
                    )
    return pool.frame()


def _t5_public(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, stride, margin, cap = _params(spec, ctx)
    capped = spec.cap_rule(cap)
    crossing = spec.rule("frames", "frames.offsets", "anchors", "had a frame of their window outside the anchor's step")
    for uid in ctx.unit_ids:
        fr = ctx.frames.get(uid)
        if fr is None:
            continue
        sid = fr["step_id"]

        def same_step(a, f, sid=sid):
            return _is_step(sid[a]) and all(sid[x] == sid[a] for x in f)

        for lab, a, f in _anchors(
            fr["progress"], ctx.n(uid), offsets, stride, margin, cap, ok=same_step, capped=capped, refused=crossing
        ):
            pool.add(uid, f"f{a}", lab, f, a, meta={"step_id": int(sid[a]), "u": rnd(fr["step_u"][a])})
    return pool.frame()
