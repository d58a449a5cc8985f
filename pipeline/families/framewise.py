"""Frame-level families: T1 phase, T2 contact, T3 direction, T4 coordination, T6 motion state (T5: progress.py).

Each reads one per-frame label (a unit's or an arm's) and emits candidates at anchors spread over every run of a
label: anchors every `stride` frames, `boundary_margin` frames clear of a label change, the family's frame window
inside the unit (and inside the run or step where the family needs it), at most `cap_per_label` per unit and label
(evenly spread over time)."""

from __future__ import annotations

import numpy as np

from pipeline import labels as L

from .common import Pool, Rule, Spec, evenly, label_runs, relative_frames, rnd, stride_anchors
from .context import Context


def _anchors(
    labels,
    n: int,
    offsets,
    stride: int,
    margin: int,
    cap: int | None,
    *,
    allowed=None,
    window_in_run: bool = False,
    ok=None,
    capped: Rule | None = None,
    refused: Rule | None = None,
) -> list[tuple[object, int, list[int]]]:
    """(label, anchor, frames) over the label runs of one unit, capped per label; `capped` counts the anchors the cap
    left out, `refused` those `ok` refused."""
    per_label: dict[object, list] = {}
    mn, mx = min(offsets), max(offsets)
    tried = 0
    for s, e, lab in label_runs(labels):
        if allowed is not None and lab not in allowed:
            continue
        lo, hi = max(s + margin, -mn), min(e - 1 - margin, n - 1 - mx)  # anchors whose window fits the unit
        if window_in_run:
            lo, hi = max(lo, s - mn), min(hi, e - 1 - mx)
        for a in stride_anchors(lo, hi + 1, 0, stride):
            f = [a + o for o in offsets]
            tried += 1
            if ok is not None and not ok(a, f):
                continue
            per_label.setdefault(lab, []).append((lab, a, f))
    out = []
    for lab in sorted(per_label, key=str):
        out.extend(evenly(per_label[lab], cap))
    found = sum(len(v) for v in per_label.values())
    if refused is not None:
        refused.count(tried, tried - found)
    if capped is not None:
        capped.count(found, found - len(out))
    return out


def _params(spec: Spec, ctx: Context) -> tuple[list[int], int, int, int | None]:
    offsets = [int(o) for o in spec.frames.get("offsets", [0])]
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    return offsets, int(spec.cand("stride", 1)), int(spec.cand("boundary_margin", 0)), cap


def t1_phase(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, stride, margin, cap = _params(spec, ctx)
    allowed = set(spec.label_texts)
    capped = spec.cap_rule(cap)
    for uid in ctx.unit_ids:
        fr = ctx.frames.get(uid)
        if fr is None:
            continue
        for lab, a, f in _anchors(
            fr["phase"], ctx.n(uid), offsets, stride, margin, cap, allowed=allowed, capped=capped
        ):
            pool.add(uid, f"f{a}", lab, f, a)
    return pool.frame()


def t2_contact(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, stride, margin, cap = _params(spec, ctx)
    capped = spec.cap_rule(cap)
    unlabelled = spec.rule("contact", "", "arms", "had no contact label", setting=f"labels.contact.{spec.source}")
    for uid in ctx.unit_ids:
        for arm, d in sorted((ctx.arms.get(uid) or {}).items()):
            c = d["contact"]
            none = all(x is None for x in c)
            unlabelled.count(1, none)
            if none:
                continue
            labs = np.array([None if x is None else ("contact" if x else "no_contact") for x in c], dtype=object)
            for lab, a, f in _anchors(labs, ctx.n(uid), offsets, stride, margin, cap, capped=capped):
                key = f"{arm}|f{a}" if arm != "single" else f"f{a}"
                pool.add(uid, key, lab, f, a, qfields={"arm": arm}, meta={"arm": arm})
    return pool.frame()


def _check_offsets(spec: Spec, want, what: str) -> None:
    got = [int(o) for o in spec.frames.get("offsets", [])]
    if list(map(int, want or [])) != got:
        raise ValueError(
            f"{spec.task_id} {spec.source}: frame offsets {got} differ from the label window {what}={want}"
        )


def t3_direction(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, stride, margin, cap = _params(spec, ctx)
    _check_offsets(
        spec, ctx.cfg.labels.direction.for_source(spec.source).offsets, f"labels.direction.{spec.source}.offsets"
    )
    capped = spec.cap_rule(cap)
    calibrated = spec.rule(
        "calibrated_direction",
        "",
        "arms",
        f"had a calibrated mapping naming fewer than {spec.num_choices} directions, so are not asked about",
        setting=f"labels.direction.{spec.source}.mapping",
    )
    for uid in ctx.unit_ids:
        for arm, d in sorted((ctx.arms.get(uid) or {}).items()):
            # only the directions the (source, camera, arm) mapping names: a label outside it would be a stale table
            mapped = L.direction_mapping(ctx.cfg, spec.source, ctx.units[uid]["camera"], arm)
            allowed = set(spec.label_texts) & set(mapped)
            calibrated.count(1, len(allowed) < spec.num_choices)
            if len(allowed) < spec.num_choices:
                # the question names the arm: an option its mapping never labels is ruled out by the text alone
                # (GM-100 right arm: left/right only; AIST left arm: no `left`), so the arm gets no T3 items
                continue
            for lab, a, f in _anchors(
                d["direction"], ctx.n(uid), offsets, stride, margin, cap, allowed=allowed, capped=capped
            ):
                key = f"{arm}|f{a}" if arm != "single" else f"f{a}"
                pool.add(
                    uid,
                    key,
                    lab,
                    f,
                    a,
                    qfields={"arm": arm},
                    meta={"arm": arm, "magnitude": rnd(d["dir_mag"][a]), "purity": rnd(d["dir_purity"][a])},
                )
    return pool.frame()


def t4_coordination(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    offsets, stride, margin, cap = _params(spec, ctx)
    eligible = spec.get("eligible_arm_types")
    in_run = bool(spec.get("window_in_run", True))
    capped = spec.cap_rule(cap)
    arm_type = spec.rule(
        "eligible_arm_types",
        "eligible_arm_types",
        f"{spec.unit_word}s",
        "had an arm type the family does not ask about",
    )
    mixed = (
        None
        if in_run
        else spec.rule(
            "window_in_run", "window_in_run", "anchors", "had a frame of their window in another coordination state"
        )
    )
    for uid in ctx.unit_ids:
        out = eligible is not None and ctx.units[uid].get("arm_type") not in set(eligible)
        arm_type.count(1, out)
        if out:
            continue
        fr = ctx.frames.get(uid)
        if fr is None:
            continue
        coord = fr["coord"]

        def same_state(a, f, coord=coord):
            return all(coord[x] == coord[a] for x in f)

        for lab, a, f in _anchors(
            coord,
            ctx.n(uid),
            offsets,
            stride,
            margin,
            cap,
            window_in_run=in_run,
            ok=None if in_run else same_state,
            capped=capped,
            refused=mixed,
        ):
            pool.add(uid, f"f{a}", lab, f, a)
    return pool.frame()


def t6_motion(spec: Spec, ctx: Context):
    pool = Pool(spec, ctx.units)
    fcfg = spec.frames
    if "relative" in fcfg:
        return _t6_segments(spec, ctx, pool)
    offsets, stride, margin, cap = _params(spec, ctx)
    _check_offsets(spec, ctx.cfg.labels.motion.window, "labels.motion.window")
    per_arm = bool(spec.get("per_arm", False))
    capped = spec.cap_rule(cap)
    for uid in ctx.unit_ids:
        if per_arm:
            sources = [(arm, d["motion"], d["motion_mean"]) for arm, d in sorted((ctx.arms.get(uid) or {}).items())]
        else:
            fr = ctx.frames.get(uid)
            if fr is None:
                continue
            sources = [(None, fr["motion"], fr["motion_mean"])]
        for arm, labs, mean in sources:
            for lab, a, f in _anchors(labs, ctx.n(uid), offsets, stride, margin, cap, capped=capped):
                key = f"{arm}|f{a}" if arm not in (None, "single") else f"f{a}"
                meta = {"speed_mean": rnd(mean[a])}
                if arm is not None:
                    meta["arm"] = arm
                pool.add(uid, key, lab, f, a, qfields={"arm": arm or ""}, meta=meta)
    return pool.frame()


def _t6_segments(spec: Spec, ctx: Context, pool: Pool):
    """REASSEMBLE: five frames at fractions of each low-level segment and each "No action." segment."""
    fcfg = spec.frames
    fracs = fcfg["relative"]
    cap = spec.cap("cap_per_label", len(ctx.unit_ids), len(spec.label_texts))
    capped = spec.cap_rule(cap, "segments")
    short = spec.rule("frames", "frames.relative", "segments", f"had too few frames to show {len(fracs)} distinct ones")
    between = spec.rule(
        "motion_thresholds",
        "",
        "segments",
        "had a mean speed between the stationary and moving thresholds",
        setting=f"labels.motion.{spec.source}",
    )
    for uid in ctx.unit_ids:
        arm = (ctx.arms.get(uid) or {}).get("single")
        if arm is None:
            continue
        still, move = float(arm["still_thr"][0]), float(arm["move_thr"][0])
        spans = [
            (f"p{p['parent_index']}.{p['seg_index']}", p["start_frame"], p["end_frame"])
            for p in ctx.primitives.get(uid, [])
        ]
        spans += [
            (f"h{s['seg_index']}", s["start_frame"], s["end_frame"])
            for s in ctx.segments.get(uid, [])
            if s["no_action"]
        ]
        per_label: dict[str, list] = {}
        for key, lo, hi in sorted(spans, key=lambda x: (x[1], x[0])):
            f = relative_frames(
                int(lo), int(hi), fracs, float(fcfg.get("margin_ratio", 0.0)), int(fcfg.get("min_margin", 0))
            )
            short.count(1, f is None or f[-1] >= ctx.n(uid))
            if f is None or f[-1] >= ctx.n(uid):
                continue
            m = float(np.nanmean(arm["speed_s"][f].astype(float))) if len(f) else np.nan
            lab = L.classify_motion(m, still, move)
            between.count(1, lab is None)
            if lab is None:
                continue
            per_label.setdefault(lab, []).append((key, lab, f, m))
        for lab in sorted(per_label):
            kept = evenly(per_label[lab], cap)
            if capped is not None:
                capped.count(len(per_label[lab]), len(per_label[lab]) - len(kept))
            for key, lab_, f, m in kept:
                pool.add(
                    uid, key, lab_, f, f[len(f) // 2], qfields={"arm": ""}, meta={"speed_mean": rnd(m), "segment": key}
                )
    return pool.frame()
