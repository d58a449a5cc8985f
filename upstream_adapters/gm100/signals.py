"""GM-100 signals: the per-arm channels of the IR from an episode's LeRobot state vectors (see gm100.py for the
mapping and what is unverified about it)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from upstream_adapters.ir import SIGNALS_SCHEMA
from upstream_adapters.storage.lerobot import (
    arm_slices as _arm_slices,
    matrix as _matrix,
    names_swapped as _names_swapped,
)

COL_POS = "observation.state.arm.position"
COL_VEL = "observation.state.arm.velocity"
COL_EFFORT = "observation.state.effector.effort"
COL_GRIP = "observation.state.effector.position"  # gripper opening per arm, metres (0 closed .. 0.066 open)


def _per_gripper(m, features: dict, col: str, channel: str, notes: list[str]) -> dict | None:
    """{arm: column index} of a [left, right] gripper vector (swapped when its names say right first)."""
    if m is None:
        return None
    if m.shape[1] != 2:
        notes.append(f"{col} has width {m.shape[1]}, not 2: {channel} is null")
        return None
    return {"left": 1, "right": 0} if _names_swapped(features.get(col), 1) else {"left": 0, "right": 1}


def signals_table(
    slug: str, table: pa.Table, features: dict, unit_id: str, t_sec: np.ndarray, data_rel: str, notes: list[str]
) -> pa.Table:
    """Arms `left` and `right` of the Cobot Magic from one episode's parquet (channel mapping: gm100.py)."""
    n = table.num_rows
    pos = _matrix(table, COL_POS, features, data_rel)
    vel = _matrix(table, COL_VEL, features, data_rel)
    eff = _matrix(table, COL_EFFORT, features, data_rel)
    grip = _matrix(table, COL_GRIP, features, data_rel)
    for col, m in ((COL_POS, pos), (COL_VEL, vel), (COL_EFFORT, eff), (COL_GRIP, grip)):
        if m is None:
            notes.append(f"column {col} absent: its channels are null")
    pos_sl = _arm_slices(pos, features.get(COL_POS), notes, COL_POS)
    vel_sl = _arm_slices(vel, features.get(COL_VEL), notes, COL_VEL)
    # speed_full: the arm's whole half of the velocity vector (the phase threshold was tuned on ||velocity[0:6]||)
    vel_full = {a: slice(s.start, s.start + vel.shape[1] // 2) for a, s in vel_sl.items()} if vel_sl else None
    eff_ix = _per_gripper(eff, features, COL_EFFORT, "gripper_effort", notes)
    grip_ix = _per_gripper(grip, features, COL_GRIP, "gripper_width", notes)

    # both arms in one table (the left arm's rows, then the right arm's), each column built once from numpy
    arms = ("left", "right")

    def both(per_arm: dict | None) -> pa.Array:
        if per_arm is None:
            return pa.nulls(2 * n, pa.float64())
        values = np.concatenate([np.asarray(per_arm[a], dtype=np.float64) for a in arms])
        return pa.array(values, pa.float64(), from_pandas=True)  # NaN (a null list entry) -> null

    def text(value: str) -> pa.Array:
        return pa.repeat(pa.scalar(value, pa.string()), 2 * n)

    p = {a: pos[:, pos_sl[a]] for a in arms} if pos_sl else None
    return pa.Table.from_arrays(
        [
            text(slug),
            text(unit_id),
            pa.array(np.repeat(np.array(arms), n), pa.string()),
            pa.array(np.tile(np.arange(n, dtype=np.int64), 2)),
            pa.array(np.tile(np.asarray(t_sec, dtype=np.float64), 2)),
            *(both({a: p[a][:, k] for a in arms} if p else None) for k in range(3)),
            both({a: np.linalg.norm(vel[:, vel_sl[a]], axis=1) for a in arms} if vel_sl else None),
            both({a: eff[:, eff_ix[a]] for a in arms} if eff_ix is not None else None),
            both({a: grip[:, grip_ix[a]] for a in arms} if grip_ix is not None else None),
            both(None),
            both({a: np.linalg.norm(vel[:, vel_full[a]], axis=1) for a in arms} if vel_full else None),
        ],
        schema=SIGNALS_SCHEMA,
    )
