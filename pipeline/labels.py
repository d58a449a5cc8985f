"""Process labels: small source-agnostic rules that turn the episode IR into per-frame process labels.

Every threshold comes from configs/labels.yaml (`cfg["labels"]`, per source where the sources differ); the rule
functions below take plain numpy arrays and explicit parameters so that each can be tested on hand-made signals.
`compute_labels(source, ir, cfg)` applies them to one source partition and returns these tables (polars):

units       one row per unit
            source, unit_id, camera, fps, num_frames, arm_type (GM-100 from arm activity; "single_arm" for a
            single-arm unit; null for other bimanual hardware), primary_arm (left | right | both | single | null),
            outcome (success | failure | null: RH20T rating rule), rating, meta_json (per-unit thresholds, evidence)
frames      one row per unit and frame of the primary camera (frame_index 0..num_frames-1)
            source, unit_id, frame_index, phase (one of labels.phases | null), motion (moving | stationary | null,
            the unit's arm; bimanual: combined as configured), motion_mean (window mean speed behind it),
            coord (both_active | left_only | right_only | both_idle | null; bimanual units only, null near a change
            or in a short run), step_id (local step holding the frame | null), step_u (progress 0..1 | null),
            progress (early | middle | late | null near a bin edge)
arms        one row per unit, arm and frame
            source, unit_id, arm, frame_index, speed (native or derived), speed_s (smoothed), motion, motion_mean,
            still_thr, move_thr (the thresholds behind motion), active (coordination activity | null),
            contact (bool | null where the source or the arm has no contact rule), direction (left | right | up |
            down | null), dir_mag (dominant image-axis displacement), dir_purity
steps       one row per local step (interval): source, unit_id, step_id, start_frame, end_frame (inclusive), kind
            (contact_step | interaction_run | high_segment), arm_pattern, text (REASSEMBLE high-level text), success
segments    REASSEMBLE high-level segments with their primitive chains
            source, unit_id, seg_index, text (trailing period removed), verb (lower case), no_action, start_frame,
            end_frame, success, chain (distinct consecutive low-level labels), chain_start, chain_end (frame range of
            each chain element's run)
primitives  REASSEMBLE low-level segments
            source, unit_id, parent_index, seg_index, text, start_frame, end_frame, phase, contact, next_text (next
            distinct label within the same high-level segment | null), high_text, high_verb, high_success

Tables are sorted by their keys; the same IR and config give identical tables.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl

PHASE_NULL = -1
DIRECTIONS = ("left", "right", "up", "down")
COORD_STATES = ("both_active", "left_only", "right_only", "both_idle")
PROGRESS_BINS = ("early", "middle", "late")
MOTION_STATES = ("stationary", "moving")
NO_ACTION = "No action"


# ================================================================================================ small helpers


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _nanq(x: np.ndarray, q: float) -> float:
    """Quantile over the non-NaN values (NaN when there are none); faster than np.nanquantile."""
    v = x[~np.isnan(x)]
    return float(np.quantile(v, q)) if v.size else math.nan


def per_source(section: dict, source: str) -> dict:
    """The entry of a per-source config section (an empty dict when the source has none)."""
    return dict((section or {}).get(source) or {})


def normalize_text(text: str | None) -> str:
    """Collapse whitespace and drop a trailing period ("Pick round peg 1." -> "Pick round peg 1")."""
    return " ".join(str(text or "").split()).rstrip(".").strip()


def is_no_action(text: str | None) -> bool:
    return normalize_text(text).lower() == NO_ACTION.lower()


def high_level_verb(text: str | None) -> str:
    t = normalize_text(text)
    return t.split(maxsplit=1)[0].lower() if t else ""


def runs(mask) -> list[tuple[int, int]]:
    """Runs of True as (start, end_exclusive), in order."""
    m = np.asarray(mask, dtype=bool)
    if m.size == 0:
        return []
    d = np.diff(np.concatenate(([0], m.astype(np.int8), [0])))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def drop_short_runs(mask, min_len: int) -> np.ndarray:
    out = np.asarray(mask, dtype=bool).copy()
    for s, e in runs(out):
        if e - s < min_len:
            out[s:e] = False
    return out


def events_to_mask(n: int, events) -> np.ndarray:
    """Contact events [(contact_frame, release_frame)] -> per-frame mask, contact on [contact, release)."""
    m = np.zeros(n, dtype=bool)
    for c, r in events:
        m[max(0, c):max(0, min(n, r))] = True
    return m


def value_runs(codes) -> list[tuple[int, int, int]]:
    """Runs of equal values as (start, end_exclusive, value)."""
    c = np.asarray(codes)
    if c.size == 0:
        return []
    cut = np.flatnonzero(c[1:] != c[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [c.size]))
    return [(int(s), int(e), c[s].item()) for s, e in zip(starts, ends)]


# ================================================================================================ speed


def derive_speed(t_sec, pos) -> np.ndarray:
    """|d pos| / d t with a backward difference (frame 0 takes frame 1's value). `pos` is (n, k), NaN where missing;
    channels that are NaN throughout are ignored. Returns NaN where a position or the clock step is unusable."""
    t = _f64(t_sec)
    p = _f64(pos)
    n = t.size
    if p.ndim == 1:
        p = p[:, None]
    keep = ~np.all(np.isnan(p), axis=0)
    p = p[:, keep]
    out = np.full(n, np.nan)
    if n < 2 or p.shape[1] == 0:
        return out
    dp = np.linalg.norm(np.diff(p, axis=0), axis=1)
    dt = np.diff(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(dt > 0, dp / dt, np.nan)
    out[1:] = v
    out[0] = v[0]
    return out


def _ffill_nan(x: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(x)
    if ok.all() or not ok.any():
        return x
    idx = np.where(ok, np.arange(x.size), -1)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(ok))
    idx[idx < 0] = first
    return x[idx]


def ema(x, span: int, block: int = 128) -> np.ndarray:
    """Causal exponential moving average, alpha = 2 / (span + 1), y0 = x0 (no bias adjustment); a missing value
    carries the previous input forward. Vectorised in blocks (closed form of the recursion inside each block)."""
    x = _f64(x)
    if x.size == 0 or span <= 1:
        return x.copy()
    x = _ffill_nan(x)
    if np.isnan(x[0]):
        return x.copy()
    a = 2.0 / (float(span) + 1.0)
    d = 1.0 - a
    out = np.empty_like(x)
    carry = x[0]
    k = np.arange(1, block + 1, dtype=np.float64)
    dk = d ** k            # d^1 .. d^B
    inv = d ** -k          # d^-1 .. d^-B
    out[0] = carry  # y_0 = x_0, then blocks from index 1
    start = 1
    while start < x.size:
        end = min(x.size, start + block)
        m = end - start
        xb = x[start:end]
        acc = np.cumsum(a * xb * inv[:m])
        yb = dk[:m] * (carry + acc)
        out[start:end] = yb
        carry = yb[-1]
        start = end
    return out


def box(x, span: int) -> np.ndarray:
    """Centred moving average over `span` frames, averaging only the frames present (edges and NaNs)."""
    x = _f64(x)
    if x.size == 0 or span <= 1:
        return x.copy()
    ok = ~np.isnan(x)
    k = np.ones(int(span))
    num = np.convolve(np.where(ok, x, 0.0), k, mode="same")
    den = np.convolve(ok.astype(np.float64), k, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def smooth(x, kind: str, span: int) -> np.ndarray:
    if kind in (None, "none") or int(span) <= 1:
        return _f64(x).copy()
    if kind == "ema":
        return ema(x, int(span))
    if kind == "box":
        return box(x, int(span))
    raise ValueError(f"unknown smoothing {kind!r}")


def window_mean(x, offsets) -> np.ndarray:
    """Per frame f: mean of x[f + o] over the offsets; NaN where the window leaves the signal or meets a NaN."""
    x = _f64(x)
    n = x.size
    out = np.zeros(n)
    valid = np.ones(n, dtype=bool)
    for o in offsets:
        o = int(o)
        shifted = np.full(n, np.nan)
        if o >= 0:
            shifted[: max(0, n - o)] = x[o:]
        else:
            shifted[-o:] = x[: n + o]
        valid &= ~np.isnan(shifted)
        out += np.nan_to_num(shifted)
    out = out / max(1, len(offsets))
    out[~valid] = np.nan
    return out


def hysteresis(x, high: float, low: float, initial: bool = False) -> np.ndarray:
    """On when x >= high, off when x < low, otherwise keep the previous state (NaN keeps it too)."""
    x = _f64(x)
    n = x.size
    code = np.full(n, -1, dtype=np.int8)
    code[x < low] = 0
    code[x >= high] = 1
    idx = np.where(code >= 0, np.arange(n), -1)
    last = np.maximum.accumulate(idx) if n else idx
    out = np.where(last >= 0, code[np.maximum(last, 0)] == 1, bool(initial))
    return out.astype(bool)


# ================================================================================================ contact


def effort_baseline(effort, head_ratio: float, tail_ratio: float, sigma_floor: float) -> tuple[float, float]:
    """GM-100 gripper effort: baseline = median of the last tail_ratio, sigma = std of the first head_ratio."""
    e = _f64(effort)
    e = e[~np.isnan(e)]
    if e.size == 0:
        return math.nan, math.nan
    n = e.size
    head = e[: max(1, int(n * head_ratio))]
    tail = e[-max(1, int(n * tail_ratio)):]
    return float(np.median(tail)), max(float(np.std(head)), float(sigma_floor))


def detect_effort_contacts(effort, *, head_ratio: float = 0.1, tail_ratio: float = 0.1, contact_sigma_k: float = 3.0,
                           release_sigma_k: float = 2.0, min_persist_frames: int = 5, sigma_floor: float = 1e-6,
                           min_effort_range: float = 0.0, boundary_ignore: int = 0, **_ignored) -> list[tuple[int, int]]:
    """Contact events of one gripper from its effort signal: contact starts at the first frame of >= min_persist
    consecutive frames below baseline - k sigma; it is released at the first later frame back within baseline +- 2
    sigma (searched from the end of the persistence run). A contact never released lasts to the last frame.
    Returns [(contact_frame, release_frame)] with release exclusive."""
    e = _f64(effort)
    n = e.size
    if n == 0 or np.all(np.isnan(e)):
        return []
    if float(np.nanmax(e) - np.nanmin(e)) <= float(min_effort_range):
        return []
    base, sigma = effort_baseline(e, head_ratio, tail_ratio, sigma_floor)
    th = base - contact_sigma_k * sigma
    lo, hi = base - release_sigma_k * sigma, base + release_sigma_k * sigma
    below = (e < th).astype(np.int32)  # NaN compares False
    k = int(min_persist_frames)
    if n < k:
        return []
    run_ok = np.flatnonzero(np.convolve(below, np.ones(k, dtype=np.int32), mode="valid") == k)
    run_ok = run_ok[(run_ok >= boundary_ignore)]
    inband = np.flatnonzero((e >= lo) & (e <= hi))
    events = []
    cur = 0
    while True:
        j = np.searchsorted(run_ok, cur)
        if j >= run_ok.size:
            break
        c = int(run_ok[j])
        r_i = np.searchsorted(inband, c + k)
        r = int(inband[r_i]) if r_i < inband.size else n
        events.append((c, r))
        cur = r + 1
        if r >= n:
            break
    return events


def force_contact_mask(force, *, ema_span: int = 9, hi_quantile: float = 0.8, hi_floor: float = 2.5,
                       lo_ratio: float = 0.6, lo_floor: float = 1.5, min_run_frames: int = 6,
                       **_ignored) -> tuple[np.ndarray, dict]:
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


def gripper_hold_mask(width, *, open_quantile: float = 0.95, closed_quantile: float = 0.02, close_delta: float = 3.0,
                      hold_margin: float = 2.0, min_run_frames: int = 6, enabled: bool = True,
                      **_ignored) -> np.ndarray:
    """Holding an object: the gripper width is clearly below its open width and clearly above its fully-closed width."""
    w = _f64(width)
    if not enabled or w.size == 0 or np.all(np.isnan(w)):
        return np.zeros(w.size, dtype=bool)
    w_open = _nanq(w, open_quantile)
    w_closed = _nanq(w, closed_quantile)
    mask = (w <= w_open - close_delta) & (w >= w_closed + hold_margin)
    return drop_short_runs(mask, int(min_run_frames))


def primitive_contact(low_text: str | None, no_contact_labels) -> bool | None:
    """REASSEMBLE: contact := low-level label not in {No action, Approach}."""
    t = normalize_text(low_text)
    if not t:
        return None
    return t.lower() not in {normalize_text(x).lower() for x in no_contact_labels}


# ================================================================================================ phase


def phase_from_contacts(n: int, events, speed, *, low_velocity: float, contact_window: int, **_ignored) -> np.ndarray:
    """Phase codes (index into labels.phases: 0 pre-approach, 1 approach, 2 contact, 3 hold and carry,
    4 transfer, 5 release) from contact events and the speed of the acting arm.

    With contact events: before the first contact, slow frames are pre-approach and the others approach; between
    two contacts, approach; the first contact_window frames of a contact are contact, the rest hold and carry until
    the speed has peaked and dropped below low_velocity, then transfer until the release; after the last release,
    release. Without contact events: approach from the first to the last moving frame (transfer after the peak once
    slow again), release after it, pre-approach before it."""
    v = _f64(speed)
    labels = np.zeros(n, dtype=np.int8)
    if n == 0:
        return labels
    vv = np.nan_to_num(v, nan=0.0)
    evs = sorted((max(0, min(int(c), n - 1)), max(0, min(int(r), n))) for c, r in events)
    evs = [(c, r) for c, r in evs if r > c]
    if not evs:
        active = vv >= low_velocity
        if active.any():
            first = int(np.argmax(active))
            last = int(n - 1 - np.argmax(active[::-1]))
            labels[first:last + 1] = 1
            peak = first + int(np.argmax(vv[first:last + 1]))
            below = np.flatnonzero(vv[peak:last + 1] < low_velocity)
            if below.size:
                labels[peak + int(below[0]):last + 1] = 4
            labels[last + 1:] = 5
        return labels
    prev_release = 0
    for i, (c, r) in enumerate(evs):
        if c > prev_release or i == 0:
            lo = prev_release if i > 0 else 0
            if i == 0:
                labels[lo:c] = np.where(vv[lo:c] < low_velocity, 0, 1)
            else:
                labels[lo:c] = 1
        c_end = min(r, c + int(contact_window))
        labels[c:c_end] = 2
        if c_end < r:
            labels[c_end:r] = 3
            peak = c_end + int(np.argmax(vv[c_end:r]))
            below = np.flatnonzero(vv[peak:r] < low_velocity)
            if below.size:
                labels[max(c_end, peak + int(below[0])):r] = 4
        prev_release = max(prev_release, r)
    labels[prev_release:] = 5
    return labels


def phase_from_primitive(low_text: str | None, high_text: str | None, phase_map: dict) -> str | None:
    """REASSEMBLE low-level label -> phase; a mapping value may depend on the high-level verb ({verb: phase,
    default: phase})."""
    t = normalize_text(low_text)
    for key, val in (phase_map or {}).items():
        if normalize_text(key).lower() == t.lower():
            if isinstance(val, dict):
                return val.get(high_level_verb(high_text), val.get("default"))
            return val
    return None


# ================================================================================================ motion


def motion_thresholds(speed_s, spec: dict) -> tuple[float, float]:
    """(stationary, moving) thresholds: fixed, or per unit and arm from quantiles of the smoothed speed."""
    mode = spec.get("mode", "absolute")
    if mode == "absolute":
        return float(spec["stationary"]), float(spec["moving"])
    if mode == "quantile":
        s = _f64(speed_s)
        s = s[~np.isnan(s)]
        if s.size == 0:
            return math.nan, math.nan
        lo = max(float(np.quantile(s, spec["stationary_q"])), float(spec.get("stationary_floor", 0.0)))
        hi = max(float(np.quantile(s, spec["moving_q"])), float(spec.get("moving_floor", 0.0)))
        return lo, max(hi, lo)
    raise ValueError(f"unknown motion threshold mode {mode!r}")


def classify_motion(mean_speed, stationary: float, moving: float):
    """'moving' when >= moving, 'stationary' when <= stationary, None between (or NaN). Scalars or arrays."""
    m = _f64(mean_speed)
    out = np.full(m.shape, None, dtype=object)
    out[m >= moving] = "moving"
    out[m <= stationary] = "stationary"
    return out.item() if out.ndim == 0 else out


# ================================================================================================ direction


def direction_labels(pos: dict, offsets, mapping: dict, *, min_delta: float, purity_ratio: float,
                     consistent: bool = True, consistency_tolerance: float = 0.25):
    """Image-plane motion direction per anchor frame over the window `offsets` (first to last).

    `pos` maps an IR position channel (pos_x, ...) to its per-frame array; `mapping` maps an image direction
    (left/right/up/down) to {axis, sign}: moving that way in the image is a positive `sign * d axis`. The dominant
    axis (largest |d|) among the mapped axes gives the direction when |d| >= min_delta, |d| / (largest other |d|)
    >= purity_ratio, the (axis, sign) is mapped, and (if consistent) no step between consecutive window frames goes
    against it by more than consistency_tolerance * |d|. Returns (labels object array, magnitude, purity)."""
    offsets = [int(o) for o in offsets]
    axes = sorted({m["axis"] for m in mapping.values()})
    n = len(next(iter(pos.values()))) if pos else 0
    labels = np.full(n, None, dtype=object)
    mag = np.full(n, np.nan)
    pur = np.full(n, np.nan)
    if n == 0 or not axes:
        return labels, mag, pur

    def shifted(x, o):
        out = np.full(n, np.nan)
        if o >= 0:
            out[: max(0, n - o)] = x[o:]
        else:
            out[-o:] = x[: n + o]
        return out

    deltas = []
    steps = []
    for a in axes:
        x = _f64(pos.get(a, np.full(n, np.nan)))
        pts = [shifted(x, o) for o in offsets]
        deltas.append(pts[-1] - pts[0])
        steps.append([b - a_ for a_, b in zip(pts[:-1], pts[1:])])
    d = np.vstack(deltas)  # (n_axes, n)
    ad = np.abs(d)
    valid = ~np.isnan(ad).any(axis=0)
    ad0 = np.where(np.isnan(ad), -1.0, ad)
    dom = np.argmax(ad0, axis=0)
    dom_mag = ad0[dom, np.arange(n)]
    if len(axes) > 1:
        other = np.where(np.arange(len(axes))[:, None] == dom[None, :], -1.0, ad0).max(axis=0)
    else:
        other = np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        purity = np.where(other > 0, dom_mag / np.maximum(other, 1e-12), np.inf)
    dom_sign = np.sign(d[dom, np.arange(n)])
    ok = valid & (dom_mag >= min_delta) & (purity >= purity_ratio)
    if consistent and len(offsets) > 2:
        for i, a in enumerate(axes):
            sel = ok & (dom == i)
            if not sel.any():
                continue
            for st in steps[i]:
                against = -dom_sign * st  # positive when the step goes against the net direction
                bad = sel & ((against > consistency_tolerance * dom_mag) | np.isnan(against))
                ok &= ~bad
    lookup = {(m["axis"], int(np.sign(m["sign"]))): name for name, m in mapping.items()}
    for i, a in enumerate(axes):
        for sgn in (1, -1):
            name = lookup.get((a, sgn))
            sel = ok & (dom == i) & (dom_sign == sgn)
            if name is not None:
                labels[sel] = name
    has = np.array([x is not None for x in labels], dtype=bool)
    mag[has] = dom_mag[has]
    pur[has] = np.minimum(purity[has], 1e6)
    return labels, mag, pur


# ================================================================================================ activity / arms


def activity_mask(speed, spec: dict) -> tuple[np.ndarray, dict]:
    """Per-arm activity for coordination: smoothed speed, then hysteresis (high/low) or a quantile threshold."""
    s = smooth(speed, spec.get("smooth", "none"), int(spec.get("span", 1)))
    mode = spec.get("mode", "hysteresis")
    if mode == "hysteresis":
        hi, lo = float(spec["high"]), float(spec["low"])
        init = bool(s.size and not np.isnan(s[0]) and s[0] >= hi)
        return hysteresis(s, hi, lo, initial=init), {"high": hi, "low": lo}
    if mode == "quantile":
        ok = s[~np.isnan(s)]
        th = max(float(np.quantile(ok, spec["q"])) if ok.size else math.inf, float(spec.get("floor", 0.0)))
        return (np.nan_to_num(s, nan=-np.inf) >= th), {"threshold": round(th, 6)}
    raise ValueError(f"unknown activity mode {mode!r}")


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
        keep[max(0, ch - transition_margin):min(n, ch + transition_margin)] = False
    c[~keep] = -1
    return c


def arm_type_from_activity(left_active, right_active, *, min_active_share: float, sync_overlap: float) -> tuple[str, str]:
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


# ================================================================================================ steps / progress


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


def steps_from_contact_anchors(events_by_arm: dict, speed, *, anchor_merge_gap: int, merge_gap: int,
                               transition_peak: float, transition_mean: float, max_anchors: int, min_span: int,
                               **_ignored) -> list[dict]:
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
            seg = v[cur["end"]:a["start"]] if a["start"] > cur["end"] else np.zeros(1)
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


def steps_from_runs(contact_mask, moving_mask, *, contact_min_run: int, moving_min_run: int, merge_gap: int,
                    min_span: int, **_ignored) -> list[dict]:
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


def moving_mask_hysteresis(speed_s, *, hi_quantile: float, hi_floor: float, lo_ratio: float, lo_floor: float,
                           **_ignored) -> np.ndarray:
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


# ================================================================================================ outcome / chains


def outcome_from_rating(rating, *, success_min: int = 2, failure_max: int = 1, excluded=(-1,), **_ignored) -> str | None:
    """RH20T: rating > 1 success, rating in 0..1 failure, -1 (and null / other negatives) excluded."""
    if rating is None or (isinstance(rating, float) and math.isnan(rating)):
        return None
    r = int(rating)
    if r in set(excluded) or r < 0:
        return None
    if r >= success_min:
        return "success"
    if r <= failure_max:
        return "failure"
    return None


def distinct_chain(texts) -> list[tuple[str, int, int]]:
    """Distinct consecutive labels of a low-level sequence: [(label, first_pos, last_pos)]."""
    out: list[list] = []
    for i, t in enumerate(texts):
        t = normalize_text(t)
        if not t:
            continue
        if out and out[-1][0] == t:
            out[-1][2] = i
        else:
            out.append([t, i, i])
    return [(a, b, c) for a, b, c in out]


# ================================================================================================ driver

_UNITS_SCHEMA = {"source": pl.String, "unit_id": pl.String, "camera": pl.String, "fps": pl.Float64,
                 "num_frames": pl.Int64, "arm_type": pl.String, "primary_arm": pl.String, "outcome": pl.String,
                 "rating": pl.Int64, "meta_json": pl.String}
_FRAMES_SCHEMA = {"source": pl.String, "unit_id": pl.String, "frame_index": pl.Int64, "phase": pl.String,
                  "motion": pl.String, "motion_mean": pl.Float64, "coord": pl.String, "step_id": pl.Int64,
                  "step_u": pl.Float64, "progress": pl.String}
_ARMS_SCHEMA = {"source": pl.String, "unit_id": pl.String, "arm": pl.String, "frame_index": pl.Int64,
                "speed": pl.Float64, "speed_s": pl.Float64, "motion": pl.String, "motion_mean": pl.Float64,
                "still_thr": pl.Float64, "move_thr": pl.Float64, "active": pl.Boolean, "contact": pl.Boolean,
                "direction": pl.String, "dir_mag": pl.Float64, "dir_purity": pl.Float64}
_STEPS_SCHEMA = {"source": pl.String, "unit_id": pl.String, "step_id": pl.Int64, "start_frame": pl.Int64,
                 "end_frame": pl.Int64, "kind": pl.String, "arm_pattern": pl.String, "text": pl.String,
                 "success": pl.Boolean}
_SEGMENTS_SCHEMA = {"source": pl.String, "unit_id": pl.String, "seg_index": pl.Int64, "text": pl.String,
                    "verb": pl.String, "no_action": pl.Boolean, "start_frame": pl.Int64, "end_frame": pl.Int64,
                    "success": pl.Boolean, "chain": pl.List(pl.String), "chain_start": pl.List(pl.Int64),
                    "chain_end": pl.List(pl.Int64)}
_PRIMITIVES_SCHEMA = {"source": pl.String, "unit_id": pl.String, "parent_index": pl.Int64, "seg_index": pl.Int64,
                      "text": pl.String, "start_frame": pl.Int64, "end_frame": pl.Int64, "phase": pl.String,
                      "contact": pl.Boolean, "next_text": pl.String, "high_text": pl.String, "high_verb": pl.String,
                      "high_success": pl.Boolean}
TABLE_SCHEMAS = {"units": _UNITS_SCHEMA, "frames": _FRAMES_SCHEMA, "arms": _ARMS_SCHEMA, "steps": _STEPS_SCHEMA,
                 "segments": _SEGMENTS_SCHEMA, "primitives": _PRIMITIVES_SCHEMA}
_CHANNELS = ("pos_x", "pos_y", "pos_z", "speed", "gripper_effort", "gripper_width", "force")


class _Cols:
    """Column accumulator: lists of numpy arrays / python values concatenated once at the end."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.parts: dict[str, list] = {k: [] for k in schema}

    def add(self, **cols):
        n = None
        for k, v in cols.items():
            if isinstance(v, np.ndarray):
                n = v.size
                break
        for k in self.schema:
            v = cols.get(k)
            if n is not None and not isinstance(v, np.ndarray):
                v = [v] * n
            elif n is None:
                v = [v]
            self.parts[k].append(v)

    def frame(self, sort: list[str]) -> pl.DataFrame:
        data = {}
        for k, dtype in self.schema.items():
            chunks = self.parts[k]
            if not chunks:
                data[k] = pl.Series(k, [], dtype=dtype)
                continue
            if dtype in (pl.Float64, pl.Int64, pl.Boolean) and all(isinstance(c, np.ndarray) and c.dtype != object
                                                                     for c in chunks):
                arr = np.concatenate(chunks)
                s = pl.Series(k, arr)
                if dtype == pl.Float64:
                    s = s.cast(pl.Float64).fill_nan(None)
                data[k] = s.cast(dtype)
            else:
                flat: list = []
                for c in chunks:
                    flat.extend(c.tolist() if isinstance(c, np.ndarray) else c)
                if dtype == pl.Float64:
                    flat = [None if (x is None or (isinstance(x, float) and math.isnan(x))) else float(x) for x in flat]
                data[k] = pl.Series(k, flat, dtype=dtype)
        return pl.DataFrame(data).sort(sort)


def _codes_to_str(codes: np.ndarray, names) -> np.ndarray:
    out = np.full(codes.size, None, dtype=object)
    for i, name in enumerate(names):
        out[codes == i] = name
    return out


def _unit_signal_arrays(signals: pl.DataFrame, unit_nframes: dict[str, int]) -> dict[str, dict[str, dict]]:
    """unit_id -> arm -> {t_sec, channel arrays (length num_frames, NaN where missing)}."""
    if signals is None or signals.height == 0:
        return {}
    sig = signals.select(["unit_id", "arm", "frame_index", "t_sec", *_CHANNELS]).sort(["unit_id", "arm", "frame_index"])
    sig = sig.with_columns([pl.col(c).cast(pl.Float64).fill_null(np.nan) for c in ("t_sec", *_CHANNELS)])
    uid = sig.get_column("unit_id").to_numpy()
    arm = sig.get_column("arm").to_numpy()
    fi = sig.get_column("frame_index").to_numpy()
    arrays = {c: sig.get_column(c).to_numpy() for c in ("t_sec", *_CHANNELS)}
    key = np.char.add(np.char.add(uid.astype(str), "\x1f"), arm.astype(str)) if uid.size else uid
    cut = np.flatnonzero(key[1:] != key[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [key.size]))
    out: dict[str, dict[str, dict]] = {}
    for s, e in zip(starts, ends):
        u, a = str(uid[s]), str(arm[s])
        n = unit_nframes.get(u)
        if n is None:
            continue
        idx = fi[s:e]
        d = {}
        if e - s == n and idx[0] == 0 and idx[-1] == n - 1:  # the usual case: one row per frame, in order
            for c, arr in arrays.items():
                d[c] = arr[s:e]
        else:
            keep = (idx >= 0) & (idx < n)
            idx = idx[keep]
            for c, arr in arrays.items():
                full = np.full(n, np.nan)
                full[idx] = arr[s:e][keep]
                d[c] = full
        if np.isnan(d["t_sec"]).any():  # fill the clock for missing frames linearly (used for speed only)
            t = d["t_sec"]
            ok = ~np.isnan(t)
            if ok.sum() >= 2:
                d["t_sec"] = np.interp(np.arange(n), np.flatnonzero(ok), t[ok])
        out.setdefault(u, {})[a] = d
    return out


def _segments_by_unit(segments: pl.DataFrame | None) -> dict[str, dict]:
    if segments is None or segments.height == 0:
        return {}
    out: dict[str, dict] = {}
    for r in segments.sort(["unit_id", "level", "parent_index", "seg_index"], nulls_last=True).iter_rows(named=True):
        d = out.setdefault(r["unit_id"], {"high": [], "low": {}})
        if r["level"] == "high":
            d["high"].append(r)
        else:
            d["low"].setdefault(r["parent_index"], []).append(r)
    for d in out.values():
        d["high"].sort(key=lambda r: r["seg_index"])
        for lst in d["low"].values():
            lst.sort(key=lambda r: r["seg_index"])
    return out


def compute_labels(source: str, ir: dict[str, pl.DataFrame], cfg: dict) -> dict[str, pl.DataFrame]:
    """Apply the label rules to one source partition of the IR (see the module docstring for the tables)."""
    L = cfg["labels"]
    phases = list(L["phases"])
    bins = L["progress_bins"]
    speed_spec = per_source(L.get("speed"), source)
    contact_spec = per_source(L.get("contact"), source)
    phase_spec = per_source(L.get("phase"), source)
    motion_spec = per_source(L.get("motion"), source)
    motion_window = list(L.get("motion", {}).get("window", [0]))
    activity_spec = per_source(L.get("activity"), source)
    armtype_spec = per_source(L.get("arm_type"), source)
    dir_all = L.get("direction", {}) or {}
    dir_spec = per_source(dir_all, source)
    steps_spec = per_source(L.get("steps"), source)
    outcome_spec = per_source(L.get("outcome"), source)

    units_ir = ir["units"].sort("unit_id")
    unit_rows = [r for r in units_ir.iter_rows(named=True) if r["source"] == source]
    nframes = {r["unit_id"]: int(r["num_frames"]) for r in unit_rows}
    sig = _unit_signal_arrays(ir.get("signals"), nframes)
    segs = _segments_by_unit(ir.get("segments"))

    T = {name: _Cols(schema) for name, schema in TABLE_SCHEMAS.items()}

    for u in unit_rows:
        uid, n = u["unit_id"], int(u["num_frames"])
        arms = sig.get(uid, {})
        arm_names = sorted(arms)
        bimanual = {"left", "right"} <= set(arm_names)
        meta: dict = {}
        fidx = np.arange(n, dtype=np.int64)

        # ---- speed per arm
        speed, speed_s = {}, {}
        for a in arm_names:
            d = arms[a]
            v = d["speed"]
            if np.all(np.isnan(v)):
                v = derive_speed(d["t_sec"], np.column_stack([d["pos_x"], d["pos_y"], d["pos_z"]]))
            speed[a] = v
            speed_s[a] = smooth(v, speed_spec.get("smooth", "none"), int(speed_spec.get("span", 1)))

        # ---- activity, coordination, arm type
        active: dict[str, np.ndarray] = {}
        coord = np.full(n, -1, dtype=np.int8)
        if activity_spec and bimanual:
            for a in ("left", "right"):
                active[a], meta[f"activity_{a}"] = activity_mask(speed[a], activity_spec)
            coord = stable_codes(coordination_codes(active["left"], active["right"]),
                                 int(activity_spec.get("transition_margin", 0)),
                                 int(activity_spec.get("min_stable_run", 1)))
        if armtype_spec and bimanual:
            arm_type, primary = arm_type_from_activity(active["left"], active["right"], **armtype_spec)
        elif u.get("arm_layout") == "single_arm" or arm_names == ["single"]:
            arm_type, primary = "single_arm", "single"
        else:
            arm_type, primary = None, ("both" if bimanual else (arm_names[0] if arm_names else None))

        def acting_speed() -> np.ndarray:
            """Smoothed speed of the acting arm (bimanual: the faster arm), for phases and step merging."""
            if primary in speed_s:
                return speed_s[primary]
            if primary == "both" and bimanual:
                return np.fmax(speed_s["left"], speed_s["right"])
            return speed_s[arm_names[0]] if arm_names else np.full(n, np.nan)

        # ---- motion per arm (+ unit-level)
        motion_arm, mmean_arm, thr_arm = {}, {}, {}
        for a in arm_names:
            if motion_spec:
                still, move = motion_thresholds(speed_s[a], motion_spec)
                mm = window_mean(speed_s[a], motion_window)
                motion_arm[a], mmean_arm[a], thr_arm[a] = classify_motion(mm, still, move), mm, (still, move)
            else:
                motion_arm[a], mmean_arm[a], thr_arm[a] = np.full(n, None, object), np.full(n, np.nan), (np.nan, np.nan)
        if len(arm_names) == 1:
            unit_motion, unit_mmean = motion_arm[arm_names[0]], mmean_arm[arm_names[0]]
        elif bimanual and motion_spec:
            combine = motion_spec.get("combine")
            if combine == "max" and motion_spec.get("mode", "absolute") == "absolute":
                unit_mmean = np.fmax(mmean_arm["left"], mmean_arm["right"])
                unit_motion = classify_motion(unit_mmean, *thr_arm["left"])
            else:
                unit_motion, unit_mmean = np.full(n, None, object), np.full(n, np.nan)
        else:
            unit_motion, unit_mmean = np.full(n, None, object), np.full(n, np.nan)

        # ---- contact per arm
        contact_arm: dict[str, np.ndarray | None] = {a: None for a in arm_names}
        events_by_arm: dict[str, list] = {}
        method = contact_spec.get("method", "none")
        if method == "effort_drop":
            for a in arm_names:
                if primary not in ("both", a) or np.all(np.isnan(arms[a]["gripper_effort"])):
                    continue  # the idle gripper of a single-arm task carries no contact question
                ev = detect_effort_contacts(arms[a]["gripper_effort"], **contact_spec)
                events_by_arm[a] = ev
                contact_arm[a] = events_to_mask(n, ev)
        elif method == "force_hysteresis":
            for a in arm_names:
                f, w = arms[a]["force"], arms[a]["gripper_width"]
                has_f, has_w = not np.all(np.isnan(f)), not np.all(np.isnan(w))
                if not (has_f or has_w):
                    continue
                m = np.zeros(n, dtype=bool)
                if has_f:
                    fm, fmeta = force_contact_mask(f, **contact_spec)
                    m |= fm
                    meta.update(fmeta)
                if has_w:
                    m |= gripper_hold_mask(w, **(contact_spec.get("gripper") or {}))
                contact_arm[a] = m
                events_by_arm[a] = runs(m)

        # ---- REASSEMBLE segments, phase/contact from primitives
        phase_codes = np.full(n, PHASE_NULL, dtype=np.int8)
        useg = segs.get(uid, {"high": [], "low": {}})
        steps: list[dict] = []
        segment_contact = None  # REASSEMBLE: contact of the single arm from the primitive labels
        if useg["high"]:
            prim_contact = np.full(n, -1, dtype=np.int8)
            for h in useg["high"]:
                htext = normalize_text(h["text"])
                hs, he = int(h["start_frame"]), int(h["end_frame"])
                lows = useg["low"].get(h["seg_index"], [])
                chain = distinct_chain([lw["text"] for lw in lows])
                T["segments"].add(source=source, unit_id=uid, seg_index=int(h["seg_index"]), text=htext,
                                  verb=high_level_verb(htext), no_action=is_no_action(htext), start_frame=hs,
                                  end_frame=he, success=h["success"], chain=[c[0] for c in chain],
                                  chain_start=[int(lows[c[1]]["start_frame"]) for c in chain],
                                  chain_end=[int(lows[c[2]]["end_frame"]) for c in chain])
                if is_no_action(htext):
                    if phase_spec.get("method") == "low_level_map":
                        phase_codes[hs:he + 1] = phases.index(phase_spec["no_action"])
                    if method == "low_level_labels":
                        prim_contact[hs:he + 1] = 0
                    continue
                nxt_of = {}
                for i, lw in enumerate(lows):
                    t = normalize_text(lw["text"])
                    nxt = next((normalize_text(x["text"]) for x in lows[i + 1:] if normalize_text(x["text"]) != t), None)
                    nxt_of[i] = nxt
                for i, lw in enumerate(lows):
                    ls, le = int(lw["start_frame"]), int(lw["end_frame"])
                    ph = phase_from_primitive(lw["text"], htext, phase_spec.get("map", {})) \
                        if phase_spec.get("method") == "low_level_map" else None
                    ct = primitive_contact(lw["text"], contact_spec.get("no_contact_labels", [])) \
                        if method == "low_level_labels" else None
                    if ph is not None:
                        phase_codes[ls:le + 1] = phases.index(ph)
                    if ct is not None:
                        prim_contact[ls:le + 1] = int(ct)
                    T["primitives"].add(source=source, unit_id=uid, parent_index=int(h["seg_index"]),
                                        seg_index=int(lw["seg_index"]), text=normalize_text(lw["text"]),
                                        start_frame=ls, end_frame=le, phase=ph, contact=ct, next_text=nxt_of[i],
                                        high_text=htext, high_verb=high_level_verb(htext),
                                        high_success=h["success"])
                if steps_spec.get("method") == "high_segments" and (h["success"] or not steps_spec.get("success_only", True)):
                    steps.append({"start": hs, "end": he, "arm_pattern": "single", "text": htext,
                                  "success": h["success"], "kind": "high_segment"})
            if method == "low_level_labels":
                segment_contact = np.where(prim_contact < 0, None, prim_contact == 1)

        # ---- phase from contact events + speed
        if phase_spec.get("method") == "contact_speed":
            evs = [e for lst in events_by_arm.values() for e in lst]
            phase_codes = phase_from_contacts(n, evs, acting_speed(), **phase_spec)
            if not arm_names:
                phase_codes[:] = PHASE_NULL

        # ---- local steps
        sm = steps_spec.get("method", "none")
        if sm == "contact_anchors":
            for s in steps_from_contact_anchors(events_by_arm, acting_speed(), **steps_spec):
                steps.append({**s, "text": None, "success": None, "kind": "contact_step"})
        elif sm == "speed_contact_runs" and arm_names:
            a = arm_names[0]
            cm = contact_arm[a] if contact_arm.get(a) is not None else np.zeros(n, dtype=bool)
            mv = moving_mask_hysteresis(speed_s[a], **steps_spec.get("moving", {}))
            for s in steps_from_runs(cm, mv, **steps_spec):
                steps.append({**s, "text": None, "success": None, "kind": "interaction_run"})
        step_id = np.full(n, -1, dtype=np.int64)
        step_u = np.full(n, np.nan)
        for k, s in enumerate(sorted(steps, key=lambda s: (s["start"], s["end"]))):
            a, b = max(0, s["start"]), min(n - 1, s["end"])
            if b <= a:
                continue
            step_id[a:b + 1] = k
            step_u[a:b + 1] = progress_u(np.arange(a, b + 1), s["start"], s["end"])
            T["steps"].add(source=source, unit_id=uid, step_id=k, start_frame=int(s["start"]), end_frame=int(s["end"]),
                           kind=s["kind"], arm_pattern=s.get("arm_pattern"), text=s.get("text"),
                           success=s.get("success"))
        prog = progress_bin(step_u, bins) if n else np.array([], dtype=object)

        # ---- direction per arm
        dirs = {}
        mapping_cam = ((dir_spec.get("mapping") or {}).get(u["camera"]) or {}) if dir_spec else {}
        for a in arm_names:
            mp = mapping_cam.get(a)
            if not mp:
                dirs[a] = (np.full(n, None, object), np.full(n, np.nan), np.full(n, np.nan))
                continue
            dirs[a] = direction_labels({c: arms[a][c] for c in ("pos_x", "pos_y", "pos_z")}, dir_spec["offsets"], mp,
                                       min_delta=float(dir_spec["min_delta"]),
                                       purity_ratio=float(dir_all.get("purity_ratio", 1.0)),
                                       consistent=bool(dir_spec.get("consistent", False)),
                                       consistency_tolerance=float(dir_all.get("consistency_tolerance", 0.25)))

        # ---- outcome
        outcome = outcome_from_rating(u.get("rating"), **outcome_spec) if outcome_spec.get("method") == "rating" else None

        # ---- emit
        for a in arm_names:
            c = contact_arm.get(a)
            if a == "single" and segment_contact is not None:
                c = segment_contact
            T["arms"].add(source=source, unit_id=uid, arm=a, frame_index=fidx, speed=speed[a], speed_s=speed_s[a],
                          motion=motion_arm[a], motion_mean=mmean_arm[a],
                          still_thr=np.full(n, thr_arm[a][0]), move_thr=np.full(n, thr_arm[a][1]),
                          active=(active[a] if a in active else np.full(n, None, object)),
                          contact=(c if c is not None else np.full(n, None, object)),
                          direction=dirs[a][0], dir_mag=dirs[a][1], dir_purity=dirs[a][2])
        T["frames"].add(source=source, unit_id=uid, frame_index=fidx,
                        phase=_codes_to_str(phase_codes, phases), motion=unit_motion, motion_mean=unit_mmean,
                        coord=_codes_to_str(coord, COORD_STATES),
                        step_id=np.array([int(x) if x >= 0 else None for x in step_id], dtype=object),
                        step_u=step_u, progress=prog)
        for a in arm_names:
            if thr_arm.get(a) is not None:
                meta[f"motion_{a}"] = [None if math.isnan(x) else round(float(x), 6) for x in thr_arm[a]]
        T["units"].add(source=source, unit_id=uid, camera=u["camera"], fps=float(u["fps"]), num_frames=n,
                       arm_type=arm_type, primary_arm=primary, outcome=outcome, rating=u.get("rating"),
                       meta_json=json.dumps(meta, sort_keys=True, separators=(",", ":")))

    keys = {"units": ["unit_id"], "frames": ["unit_id", "frame_index"], "arms": ["unit_id", "arm", "frame_index"],
            "steps": ["unit_id", "step_id"], "segments": ["unit_id", "seg_index"],
            "primitives": ["unit_id", "parent_index", "seg_index"]}
    return {name: T[name].frame(keys[name]) for name in TABLE_SCHEMAS}
