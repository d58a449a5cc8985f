"""Local steps and progress (T5): step intervals per source and the early / middle / late bins."""

from __future__ import annotations

import numpy as np

from .signals import _f64, _nanq, hysteresis, runs

PROGRESS_BINS = ("early", "middle", "late")


def merge_anchor_events(events_by_arm: dict, anchor_merge_gap: int) -> list[dict]:
    """Contact events of all grippers -> anchors: events closer than anchor_merge_gap frames are one anchor."""
    evs = sorted((c, r, arm) for arm, lst in events_by_arm.items() for c, r in lst if r > c)
    anchors: list[dict] = []
    for c, r, arm in evs:
        if anchors and c <= anchors[-1]["end"] + anchor_merge_gap:
            anchors[-1]["end"] = max(anchors[-1]["end"], r)
            anchors[-1]["arms"].add(arm)
        else:
            anchors.append({"start": c, "end": r, "arms": {arm}})
    return anchors


def _pattern(arms: set) -> str:
    if arms == {"left"}:
        return "left"
    if arms == {"right"}:
        return "right"
    if {"left", "right"} <= arms:
        return "both"
    return "single" if arms == {"single"} else "unknown"


def steps_from_contact_anchors(
    events_by_arm: dict,
    speed,
    *,
    anchor_merge_gap: int,
    merge_gap: int,
    transition_peak: float,
    transition_mean: float,
    max_anchors: int,
    min_span: int,
    **_ignored,
) -> list[dict]:
    """GM-100 contact-aware local steps: each contact anchor is a step; two adjacent anchors merge into one step when
    the gap is short, the same grippers act, and the arm stays slow in between (a re-grasp, not a new step).
    Returns [{start, end (inclusive), arm_pattern}] of steps spanning at least min_span frames."""
    v = np.nan_to_num(_f64(speed), nan=0.0)
    anchors = merge_anchor_events(events_by_arm, anchor_merge_gap)
    steps: list[dict] = []
    for a in anchors:
        pat = _pattern(a["arms"])
        if steps:
            cur = steps[-1]
            gap = a["start"] - cur["end"]
            seg = v[cur["end"] : a["start"]] if a["start"] > cur["end"] else np.zeros(1)
            low = seg.size == 0 or (float(seg.max()) < transition_peak and float(seg.mean()) < transition_mean)
            if gap <= merge_gap and pat == cur["arm_pattern"] and low and cur["n"] < max_anchors:
                cur["end"] = max(cur["end"], a["end"])
                cur["n"] += 1
                continue
        steps.append({"start": a["start"], "end": a["end"], "arm_pattern": pat, "n": 1})
    out = []
    for s in steps:
        end_incl = s["end"] - 1
        if end_incl - s["start"] + 1 >= min_span:
            out.append({"start": int(s["start"]), "end": int(end_incl), "arm_pattern": s["arm_pattern"]})
    return out


def steps_from_runs(
    contact_mask, moving_mask, *, contact_min_run: int, moving_min_run: int, merge_gap: int, min_span: int, **_ignored
) -> list[dict]:
    """RH20T interaction intervals: runs of contact (>= contact_min_run) and of motion (>= moving_min_run) merged
    when less than merge_gap frames apart; intervals shorter than min_span frames are dropped."""
    src = [(s, e - 1) for s, e in runs(contact_mask) if e - s >= contact_min_run]
    src += [(s, e - 1) for s, e in runs(moving_mask) if e - s >= moving_min_run]
    src.sort()
    merged: list[list[int]] = []
    for s, e in src:
        if merged and s - merged[-1][1] - 1 <= merge_gap:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [{"start": int(s), "end": int(e), "arm_pattern": "single"} for s, e in merged if e - s + 1 >= min_span]


def moving_mask_hysteresis(
    speed_s, *, hi_quantile: float, hi_floor: float, lo_ratio: float, lo_floor: float, **_ignored
) -> np.ndarray:
    s = _f64(speed_s)
    if s.size == 0 or np.all(np.isnan(s)):
        return np.zeros(s.size, dtype=bool)
    hi = max(float(hi_floor), _nanq(s, hi_quantile))
    lo = max(float(lo_floor), float(lo_ratio) * hi)
    return hysteresis(s, hi, lo)


def progress_u(frame, start, end):
    """Relative position of `frame` inside [start, end] (inclusive), 0..1."""
    span = max(1, int(end) - int(start))
    return (_f64(frame) - int(start)) / span


def progress_bin(u, bins: dict):
    """'early' | 'middle' | 'late' for u inside a configured bin, None elsewhere (scalars or arrays)."""
    uu = _f64(u)
    out = np.full(uu.shape, None, dtype=object)
    for name in PROGRESS_BINS:
        lo, hi = bins[name]
        out[(uu >= lo) & (uu <= hi)] = name
    return out.item() if out.ndim == 0 else out


# ------------------------------------------------------------------------------------------ per-source methods
# Each method returns the unit's local steps [{start, end (inclusive), arm_pattern, text, success, kind}].


def _steps_contact_anchors(u: dict, spec: dict) -> list[dict]:
    return [
        {**s, "text": None, "success": None, "kind": "contact_step"}
        for s in steps_from_contact_anchors(u["events_by_arm"], u["acting_speed"], **spec)
    ]


def _steps_speed_contact_runs(u: dict, spec: dict) -> list[dict]:
    if not u["arm_names"]:
        return []
    a = u["arm_names"][0]
    cm = u["contact_arm"][a] if u["contact_arm"].get(a) is not None else np.zeros(u["n"], dtype=bool)
    mv = moving_mask_hysteresis(u["speed_s"][a], **spec["moving"])
    return [{**s, "text": None, "success": None, "kind": "interaction_run"} for s in steps_from_runs(cm, mv, **spec)]


def _steps_from_segments(u: dict, spec: dict) -> list[dict]:
    return list(u["segment_steps"])


STEP_METHODS = {
    "contact_anchors": _steps_contact_anchors,
    "speed_contact_runs": _steps_speed_contact_runs,
    "high_segments": _steps_from_segments,
    "none": lambda u, spec: [],
}
