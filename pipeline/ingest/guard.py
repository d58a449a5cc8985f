"""Which unit an ingest process held when it died, so that a reader killed on one unit (the kernel's out-of-memory
killer, a crash inside a native decoder) costs that unit, named, and not the whole build.

Ingest reads units one at a time. Before each, `UnitGuard.holding` writes the unit id into `<state>.reading` (one
small write to an open file, no fsync: the page cache outlives a killed process); after the last unit, or when the
loop stops on a Python exception (an interrupt), the file is removed. A `<state>.reading` found when a run starts
was left by a process that died reading that unit: `held_by` names it in the failed build's message
(assets/run.py), and `<state>.died.json` counts the deaths with the unit's upstream fingerprint
(`adapter.fingerprint`). A process also dies when its parent build is killed, so one death may be bad luck: the unit
is read again, and from the second death in a row on unchanged files (`DEATHS`) every later run quarantines it
without reading it, until its files change (another fingerprint: it is read again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.core.io import atomic_write_text

DEATHS = 2  # deaths in a row on the same files before a unit is refused unread
REASON = (
    "the ingest process died while reading this unit in {n} earlier runs (killed: out of memory, or a crash "
    "in a native reader); refused until its files change"
)


def held_by(state: Path) -> str | None:
    """The unit a dead ingest process was reading (its `<state>.reading`), or None."""
    try:
        return Path(f"{state}.reading").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def held_note(state: Path, source: str) -> str | None:
    """What the failed build says about the unit a dead ingest process held, or None when it held none."""
    unit = held_by(state)
    if unit is None:
        return None
    try:
        before = json.loads(Path(f"{state}.died.json").read_text(encoding="utf-8")).get(unit, {}).get("deaths", 0)
    except (OSError, ValueError, AttributeError):
        before = 0
    then = (
        "the next build quarantines it (until its files change) and reads the rest"
        if before + 1 >= DEATHS
        else "the next build reads it once more and quarantines it if its reader dies again"
    )
    return f"ingest of {source} died while reading unit {unit!r}: {then}"


class UnitGuard:
    """`state`: the path prefix of the guard's two files (the work folder's `ir/<slug>`, or a shard's); None: inert."""

    def __init__(self, state: Path | None, fingerprint):
        self.died: dict[str, dict] = {}
        self._fd = None
        if state is None:  # a run that keeps no state (tests, `processbench ingest`): nothing guarded
            return
        self.reading, self.died_path = Path(f"{state}.reading"), Path(f"{state}.died.json")
        self.reading.parent.mkdir(parents=True, exist_ok=True)
        try:
            died = json.loads(self.died_path.read_text(encoding="utf-8"))
            died = died if isinstance(died, dict) else {}
        except (OSError, ValueError):
            died = {}
        dead = held_by(state)
        for unit_id in sorted(set(died) | ({dead} if dead else set())):
            try:
                now = fingerprint(unit_id)
            except Exception as exc:  # noqa: BLE001 - an unreadable unit keeps its record by what failed
                now = f"unreadable:{type(exc).__name__}"
            before = died.get(unit_id) if isinstance(died.get(unit_id), dict) else {}
            deaths = before.get("deaths", 0) if before.get("fingerprint") == now else 0
            deaths += unit_id == dead
            if deaths:
                self.died[unit_id] = {"fingerprint": now, "deaths": deaths}
        if self.died:
            atomic_write_text(self.died_path, json.dumps(self.died, sort_keys=True, indent=1))
        else:
            self.died_path.unlink(missing_ok=True)
        self._fd = os.open(self.reading, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def refused(self, unit_id: str) -> str | None:
        """Why `unit_id` is not read (it killed an earlier reader and its files did not change), or None."""
        n = self.died.get(unit_id, {}).get("deaths", 0)
        return REASON.format(n=n) if n >= DEATHS else None

    def holding(self, unit_id: str) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, unit_id.encode(), 0)

    def close(self, completed: bool) -> None:
        """The loop ended (every unit read or refused when `completed`, else on a Python exception): nothing is
        held; after a completed loop the units that died fewer than DEATHS times are forgotten (read fine)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self.reading.unlink(missing_ok=True)
            survived = {u for u, d in self.died.items() if d["deaths"] < DEATHS} if completed else set()
            if survived:
                self.died = {u: d for u, d in self.died.items() if u not in survived}
                if self.died:
                    atomic_write_text(self.died_path, json.dumps(self.died, sort_keys=True, indent=1))
                else:
                    self.died_path.unlink(missing_ok=True)
