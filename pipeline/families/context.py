"""Per-source context handed to every family generator: unit facts and the label tables sliced per unit (lazily)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from functools import cached_property

import numpy as np
import polars as pl

from .common import arms_by_unit, by_unit

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


class Context:
    def __init__(self, source: str, ir: dict[str, pl.DataFrame], labels: dict[str, pl.DataFrame], cfg: Settings):
        self.source = source
        self.ir = ir
        self.labels = labels
        self.cfg = cfg
        lu = labels.get("units")
        if lu is None or lu.height == 0:
            lu = (
                ir["units"]
                .select("source", "unit_id", "camera", "fps", "num_frames")
                .with_columns(
                    arm_type=pl.lit(None, pl.String),
                    primary_arm=pl.lit(None, pl.String),
                    outcome=pl.lit(None, pl.String),
                )
            )
        lu = lu.filter(pl.col("source") == source).sort("unit_id")
        self.units: dict[str, dict] = {r["unit_id"]: r for r in lu.iter_rows(named=True)}
        self.unit_ids: list[str] = sorted(self.units)

    def n(self, uid: str) -> int:
        return int(self.units[uid]["num_frames"])

    def fps(self, uid: str) -> float:
        return float(self.units[uid]["fps"])

    @cached_property
    def frames(self) -> dict[str, dict[str, np.ndarray]]:
        return by_unit(
            self.labels.get("frames"),
            ["frame_index", "phase", "motion", "motion_mean", "coord", "step_id", "step_u", "progress"],
            ["unit_id", "frame_index"],
        )

    @cached_property
    def arms(self) -> dict[str, dict[str, dict[str, np.ndarray]]]:
        return arms_by_unit(
            self.labels.get("arms"),
            [
                "speed_s",
                "motion",
                "motion_mean",
                "still_thr",
                "move_thr",
                "active",
                "contact",
                "direction",
                "dir_mag",
                "dir_purity",
            ],
        )

    @cached_property
    def steps(self) -> dict[str, dict[str, np.ndarray]]:
        return by_unit(
            self.labels.get("steps"),
            ["step_id", "start_frame", "end_frame", "kind", "text", "arm_pattern"],
            ["unit_id", "step_id"],
        )

    @cached_property
    def segments(self) -> dict[str, list[dict]]:
        df = self.labels.get("segments")
        out: dict[str, list[dict]] = {}
        if df is None or df.height == 0:
            return out
        for r in df.sort(["unit_id", "seg_index"]).iter_rows(named=True):
            out.setdefault(r["unit_id"], []).append(r)
        return out

    @cached_property
    def primitives(self) -> dict[str, list[dict]]:
        df = self.labels.get("primitives")
        out: dict[str, list[dict]] = {}
        if df is None or df.height == 0:
            return out
        for r in df.sort(["unit_id", "parent_index", "seg_index"]).iter_rows(named=True):
            out.setdefault(r["unit_id"], []).append(r)
        return out

    def stationary(self, uid: str) -> np.ndarray:
        """Per frame: the robot is labelled stationary (unit-level motion; for bimanual units without a combined
        label, every arm stationary). Frames without a label count as not stationary."""
        n = self.n(uid)
        fr = self.frames.get(uid)
        if fr is not None and any(x is not None for x in fr["motion"]):
            return np.array([x == "stationary" for x in fr["motion"]], dtype=bool)
        arms = self.arms.get(uid) or {}
        if not arms:
            return np.zeros(n, dtype=bool)
        out = np.ones(n, dtype=bool)
        for a in arms.values():
            out &= np.array([x == "stationary" for x in a["motion"]], dtype=bool)
        return out
