"""Contact dimension: per-source rules that say when a gripper touches or holds an object."""

from __future__ import annotations

import math

import numpy as np

from .signals import _f64, _nanq, drop_short_runs, ema, events_to_mask, hysteresis, runs
from .text import normalize_text


def effort_baseline(effort, head_ratio: float, tail_ratio: float, sigma_floor: float) -> tuple[float, float]:
    """GM-100 gripper effort: baseline = the idle (open-gripper) level, the higher of the medians of the first
    head_ratio and the last tail_ratio (effort drops on a grasp, so a grasp held to the episode's end lowers only the
    tail); sigma = std of the first head_ratio."""
    e = _f64(effort)
    e = e[~np.isnan(e)]
    if e.size == 0:
        return math.nan, math.nan
    n = e.size
    head = e[: max(1, int(n * head_ratio))]
    tail = e[-max(1, int(n * tail_ratio)) :]
    return max(float(np.median(head)), float(np.median(tail))), max(float(np.std(head)), float(sigma_floor))


def _mean_before(e: np.ndarray, w: int) -> np.ndarray:
    """Per frame c: mean of e[c-w:c] (NaN at c = 0)."""
    idx = np.arange(e.size)
    cs = np.concatenate(([0.0], np.cumsum(e)))
    lo = np.maximum(0, idx - w)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cs[idx] - cs[lo]) / (idx - lo)


def detect_effort_contacts(
    effort,
    *,
    head_ratio: float,
    tail_ratio: float,
    contact_sigma_k: float,
    release_sigma_k: float,
    min_persist_frames: int,
    sigma_floor: float,
    min_effort_range: float,
    boundary_ignore: int,
    onset_window: int,
    **_ignored,
) -> list[tuple[int, int]]:
    """Contact events of one gripper from its effort signal: contact starts at a frame that begins >= min_persist
    consecutive frames below baseline - k sigma AND where the effort steps down: it lies >= k sigma below the mean
    of the onset_window frames before it (a slow drift across the threshold, or a signal already low at the first
    frame, is no grasp). It is released at the first frame after the
    persistence run back within +- release_sigma_k sigma of the level before the onset. A contact never released
    lasts to the last frame. Returns [(contact_frame, release_frame)] with release exclusive."""
    e = _f64(effort)
    n = e.size
    if n == 0 or np.all(np.isnan(e)):
        return []
    if float(np.nanmax(e) - np.nanmin(e)) <= float(min_effort_range):
        return []
    base, sigma = effort_baseline(e, head_ratio, tail_ratio, sigma_floor)
    th = base - contact_sigma_k * sigma
    below = (e < th).astype(np.int32)  # NaN compares False
    k = int(min_persist_frames)
    if n < k:
        return []
    ef = np.where(np.isnan(e), base, e)
    pre = _mean_before(ef, max(1, int(onset_window)))
    run_ok = np.flatnonzero(np.convolve(below, np.ones(k, dtype=np.int32), mode="valid") == k)
    run_ok = run_ok[(run_ok >= max(1, boundary_ignore))]
    run_ok = run_ok[pre[run_ok] - ef[run_ok] >= contact_sigma_k * sigma]  # the effort steps down at the onset
    events = []
    cur = 0
    while True:
        j = np.searchsorted(run_ok, cur)
        if j >= run_ok.size:
            break
        c = int(run_ok[j])
        back = np.flatnonzero(np.abs(e[c + k :] - pre[c]) <= release_sigma_k * sigma)
        r = c + k + int(back[0]) if back.size else n
        events.append((c, r))
        cur = r + 1
        if r >= n:
            break
    return events


def force_contact_mask(
    force,
    *,
    ema_span: int,
    hi_quantile: float,
    hi_floor: float,
    lo_ratio: float,
    lo_floor: float,
    min_run_frames: int,
    **_ignored,
) -> tuple[np.ndarray, dict]:
    """Contact from a force magnitude: EMA, then hysteresis between hi = max(floor, quantile) and
    lo = max(floor, ratio * hi); runs shorter than min_run_frames are dropped."""
    f = _f64(force)
    if f.size == 0 or np.all(np.isnan(f)):
        return np.zeros(f.size, dtype=bool), {}
    fs = ema(f, ema_span)
    hi = max(float(hi_floor), _nanq(fs, hi_quantile))
    lo = max(float(lo_floor), float(lo_ratio) * hi)
    mask = drop_short_runs(hysteresis(fs, hi, lo), int(min_run_frames))
    return mask, {"force_hi": round(hi, 6), "force_lo": round(lo, 6)}


def gripper_hold_mask(
    width,
    *,
    enabled: bool,
    open_quantile: float,
    close_delta: float,
    closed_width: float,
    hold_margin: float,
    min_run_frames: int,
) -> np.ndarray:
    """Holding an object: the gripper width is clearly below its open width (the episode's open_quantile) and
    clearly above the hardware's fully-closed width (closed_width, a constant: a grasp stops the fingers at the
    object's width, and an episode need not contain an empty close, so the closed width cannot come from the
    episode's own widths)."""
    w = _f64(width)
    if not enabled or w.size == 0 or np.all(np.isnan(w)):
        return np.zeros(w.size, dtype=bool)
    w_open = _nanq(w, open_quantile)
    mask = (w <= w_open - close_delta) & (w >= float(closed_width) + hold_margin)
    return drop_short_runs(mask, int(min_run_frames))


def primitive_contact(low_text: str | None, no_contact_labels) -> bool | None:
    """REASSEMBLE: contact := low-level label not in {No action, Approach}."""
    t = normalize_text(low_text)
    if not t:
        return None
    return t.lower() not in {normalize_text(x).lower() for x in no_contact_labels}


# ------------------------------------------------------------------------------------------ per-source methods
# Each method takes the unit's per-arm signal arrays and returns ({arm: per-frame contact mask}, {arm: events}).


def _contact_effort_drop(unit: dict, arms: dict, arm_names: list, primary, n: int, spec: dict, meta: dict):
    contact, events = {}, {}
    if unit["task_id"] in set(spec["no_gripper_motion_tasks"]):
        return contact, events  # public task annotation: no gripper motion, so no contact question
    for a in arm_names:
        if primary not in ("both", a) or np.all(np.isnan(arms[a]["gripper_effort"])):
            continue  # the idle gripper of a single-arm task carries no contact question
        ev = detect_effort_contacts(arms[a]["gripper_effort"], **spec)
        mask = events_to_mask(n, ev)
        hold = spec.get("gripper") or {}
        if hold.get("enabled") and not np.all(np.isnan(arms[a]["gripper_width"])):
            # a held object also shows as a gripper opening between open and fully closed (configs/labels.yaml)
            mask = mask | gripper_hold_mask(arms[a]["gripper_width"], **hold)
            ev = runs(mask)
        events[a] = ev
        contact[a] = mask
    return contact, events


def _contact_force_hysteresis(unit: dict, arms: dict, arm_names: list, primary, n: int, spec: dict, meta: dict):
    contact, events = {}, {}
    for a in arm_names:
        f, w = arms[a]["force"], arms[a]["gripper_width"]
        has_f, has_w = not np.all(np.isnan(f)), not np.all(np.isnan(w))
        if not (has_f or has_w):
            continue
        m = np.zeros(n, dtype=bool)
        if has_f:
            fm, fmeta = force_contact_mask(f, **spec)
            m |= fm
            meta.update(fmeta)
        if has_w:
            m |= gripper_hold_mask(w, **spec["gripper"])
        contact[a] = m
        events[a] = runs(m)
    return contact, events


def _contact_from_signals_none(unit: dict, arms: dict, arm_names: list, primary, n: int, spec: dict, meta: dict):
    """No signal rule: no contact (low_level_labels fills the contact from the primitive labels instead)."""
    return {}, {}


CONTACT_METHODS = {
    "effort_drop": _contact_effort_drop,
    "force_hysteresis": _contact_force_hysteresis,
    "low_level_labels": _contact_from_signals_none,
    "none": _contact_from_signals_none,
}
