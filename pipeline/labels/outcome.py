"""Outcome dimension (T7) and primitive chains (T10-T12)."""

from __future__ import annotations

import math

from .text import normalize_text


def outcome_from_rating(rating, *, success_min: int, failure_max: int, excluded, **_ignored) -> str | None:
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


# labels.outcome.<source>.method -> unit outcome (segment_success: per high-level segment, in the segments table)
OUTCOME_METHODS = {
    "rating": lambda unit, spec: outcome_from_rating(unit.get("rating"), **spec),
    "segment_success": lambda unit, spec: None,
    "none": lambda unit, spec: None,
}
