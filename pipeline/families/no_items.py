"""Units that passed ingest but gave no candidate item, each with the first reason found, so a unit is never lost
without a word: the candidates stage reports them (`no_items` in its summary, shown with the step in Dagster, and a
log warning)."""

from __future__ import annotations

import polars as pl

_CHANNELS = ("pos_x", "pos_y", "pos_z", "speed", "gripper_effort", "gripper_width", "force")
_FRAME_LABELS = ("phase", "motion", "coord", "progress")


def units_without_items(
    source: str, ir: dict[str, pl.DataFrame], labels: dict[str, pl.DataFrame], pool: pl.DataFrame
) -> pl.DataFrame:
    """(source, unit_id, reason) for each unit of the IR with no row in the candidate pool, sorted by unit_id."""
    units = ir["units"]
    have = set(pool["unit_id"].unique().to_list()) if pool.height else set()
    missing = sorted(set(units["unit_id"].to_list()) - have)
    rows = [{"source": source, "unit_id": u, "reason": _reason(u, ir, labels)} for u in missing]
    return pl.DataFrame(rows, schema={"source": pl.String, "unit_id": pl.String, "reason": pl.String})


def _reason(unit_id: str, ir: dict[str, pl.DataFrame], labels: dict[str, pl.DataFrame]) -> str:
    unit = ir["units"].filter(pl.col("unit_id") == unit_id).row(0, named=True)
    frames = ir["frames"].filter((pl.col("unit_id") == unit_id) & (pl.col("camera") == unit["camera"]))
    t = frames["t_sec"]
    if frames.height < 2:
        return f"only {frames.height} primary-camera frame(s)"
    if t.max() <= t.min():
        return "its clock is constant (t_sec never advances), so no frame window can be placed"
    sig = ir["signals"].filter(pl.col("unit_id") == unit_id)
    live = [c for c in _CHANNELS if sig.height and sig[c].drop_nulls().drop_nans().n_unique() > 1]
    if not live:
        return "every signal channel is null or constant, so no label rule can fire"
    lab = labels.get("frames")
    if lab is not None and "unit_id" in lab.columns:
        lab = lab.filter(pl.col("unit_id") == unit_id)
        cols = [c for c in _FRAME_LABELS if c in lab.columns]
        if cols and all(lab[c].drop_nulls().n_unique() <= 1 for c in cols):
            return (
                f"its {frames.height} frames carry at most one value of each frame label "
                f"({', '.join(cols)}): nothing to ask about"
            )
    return (
        f"no family's template matched ({frames.height} frames over {t.max() - t.min():.2f} s, "
        f"live channels: {', '.join(live)})"
    )
