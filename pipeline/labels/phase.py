"""Phase dimension (T1): process phases from contact events and speed, or from primitive labels."""

from __future__ import annotations

import numpy as np

from .signals import _f64
from .text import high_level_verb, normalize_text

PHASE_NULL = -1


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
            labels[first : last + 1] = 1
            peak = first + int(np.argmax(vv[first : last + 1]))
            below = np.flatnonzero(vv[peak : last + 1] < low_velocity)
            if below.size:
                labels[peak + int(below[0]) : last + 1] = 4
            labels[last + 1 :] = 5
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
                labels[max(c_end, peak + int(below[0])) : r] = 4
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


# ------------------------------------------------------------------------------------------ per-source methods
# Each method returns the unit's phase codes from the contact events, the acting arm's speed and the codes the
# segment pass already set (low_level_map).


def _phase_contact_speed(n: int, events, speed, seg_codes, has_arms: bool, spec: dict) -> np.ndarray:
    codes = phase_from_contacts(
        n, events, speed, low_velocity=spec["low_velocity"], contact_window=spec["contact_window"]
    )
    if not has_arms:
        codes[:] = PHASE_NULL
    return codes


def _phase_from_segments(n: int, events, speed, seg_codes, has_arms: bool, spec: dict) -> np.ndarray:
    return seg_codes


PHASE_METHODS = {
    "contact_speed": _phase_contact_speed,
    "low_level_map": _phase_from_segments,
    "none": _phase_from_segments,
}
