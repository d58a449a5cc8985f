"""Coordination dimension (T4) and the GM-100 arm type: per-arm activity of bimanual units."""

from __future__ import annotations

import math

import numpy as np

from .signals import hysteresis, smooth, value_runs

COORD_STATES = ("both_active", "left_only", "right_only", "both_idle")


def _hysteresis_activity(s, spec: dict) -> tuple[np.ndarray, dict]:
    hi, lo = float(spec["high"]), float(spec["low"])
    init = bool(s.size and not np.isnan(s[0]) and s[0] >= hi)
    return hysteresis(s, hi, lo, initial=init), {"high": hi, "low": lo}


def _quantile_activity(s, spec: dict) -> tuple[np.ndarray, dict]:
    ok = s[~np.isnan(s)]
    th = max(float(np.quantile(ok, spec["q"])) if ok.size else math.inf, float(spec["floor"]))
    return (np.nan_to_num(s, nan=-np.inf) >= th), {"threshold": round(th, 6)}


# labels.activity.<source>.mode -> per-arm activity rule ("none": the source has no coordination labels)
ACTIVITY_MODES = {"hysteresis": _hysteresis_activity, "quantile": _quantile_activity}


def activity_mask(speed, spec: dict) -> tuple[np.ndarray, dict]:
    """Per-arm activity for coordination: smoothed speed, then hysteresis (high/low) or a quantile threshold."""
    if spec["mode"] not in ACTIVITY_MODES:
        raise ValueError(f"labels.activity: unknown activity mode {spec['mode']!r}")
    return ACTIVITY_MODES[spec["mode"]](smooth(speed, spec["smooth"], int(spec["span"])), spec)


def coordination_codes(left_active, right_active) -> np.ndarray:
    """Index into COORD_STATES: 0 both_active, 1 left_only, 2 right_only, 3 both_idle."""
    la = np.asarray(left_active, dtype=bool)
    ra = np.asarray(right_active, dtype=bool)
    out = np.full(la.size, 3, dtype=np.int8)
    out[la & ra] = 0
    out[la & ~ra] = 1
    out[~la & ra] = 2
    return out


def stable_codes(codes, transition_margin: int, min_stable_run: int) -> np.ndarray:
    """Blank (-1) frames within transition_margin of a change and runs shorter than min_stable_run."""
    c = np.asarray(codes, dtype=np.int8).copy()
    n = c.size
    if n == 0:
        return c
    keep = np.ones(n, dtype=bool)
    for s, e, _ in value_runs(c):
        if e - s < min_stable_run:
            keep[s:e] = False
    change = np.flatnonzero(c[1:] != c[:-1]) + 1
    for ch in change:
        keep[max(0, ch - transition_margin) : min(n, ch + transition_margin)] = False
    c[~keep] = -1
    return c


def arm_type_from_activity(
    left_active, right_active, *, min_active_share: float, sync_overlap: float
) -> tuple[str, str]:
    """GM-100 arm type and primary arm from the two arms' activity."""
    la = np.asarray(left_active, dtype=bool)
    ra = np.asarray(right_active, dtype=bool)
    n = max(1, la.size)
    sl, sr = la.sum() / n, ra.sum() / n
    used_l, used_r = sl >= min_active_share, sr >= min_active_share
    if used_l and used_r:
        either = (la | ra).sum()
        overlap = (la & ra).sum() / either if either else 0.0
        return ("bimanual_sync" if overlap >= sync_overlap else "bimanual_sequential"), "both"
    if used_l != used_r:
        return ("single_left", "left") if used_l else ("single_right", "right")
    return ("single_left", "left") if sl > sr else ("single_right", "right")
