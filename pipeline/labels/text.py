"""Text helpers for segment labels (REASSEMBLE high/low-level texts)."""

from __future__ import annotations

NO_ACTION = "No action"


def normalize_text(text: str | None) -> str:
    """Collapse whitespace and drop a trailing period ("Pick round peg 1." -> "Pick round peg 1")."""
    return " ".join(str(text or "").split()).rstrip(".").strip()


def is_no_action(text: str | None) -> bool:
    return normalize_text(text).lower() == NO_ACTION.lower()


def high_level_verb(text: str | None) -> str:
    t = normalize_text(text)
    return t.split(maxsplit=1)[0].lower() if t else ""
