"""What became of each predicted item (both scorers: pipeline/scoring/mcq.py and pipeline/scoring/steps.py).

A predictions row may carry `outcome` (what `processbench eval` writes: answered, refused, truncated, empty, failed,
missing); the report counts every eval item once in OUTCOME_NAMES, an answer that does not parse as `invalid`.
"""

from __future__ import annotations

from collections import Counter

OUTCOME_NAMES = ("answered", "invalid", "refused", "truncated", "empty", "failed", "missing")
ROW_OUTCOMES = frozenset({"answered", "refused", "truncated", "empty", "failed", "missing"})  # a predictions row's
SERVER_ANSWERED = OUTCOME_NAMES[:5]  # the server gave an answer (a 200 with a completion)


def item_outcome(outcome: str | None, parsed: bool) -> str:
    """An item's outcome in the report: a row's outcome (missing without a row), `invalid` for an answer that does
    not parse."""
    if outcome is None:
        return "missing"
    if outcome == "answered" and not parsed:
        return "invalid"
    return outcome


def outcome_counts(outcomes: list[str]) -> dict:
    """Counts of OUTCOME_NAMES (disjoint: they add up to the items) and how many the server answered."""
    c = Counter(outcomes)
    out = {o: c.get(o, 0) for o in OUTCOME_NAMES}
    out["server_answered"] = sum(out[o] for o in SERVER_ANSWERED)
    return out
