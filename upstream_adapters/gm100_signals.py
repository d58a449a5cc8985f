"""GM-100 signals: the per-arm channels of the IR from an episode's LeRobot state vectors (see gm100.py for the
mapping and what is unverified about it)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .ir import SIGNALS_SCHEMA
from .storage.lerobot import arm_slices as _arm_slices, matrix as _matrix, names_swapped as _names_swapped

COL_POS = "observation.state.arm.position"
COL_VEL = "observation.state.arm.velocity"
COL_EFFORT = "observation.state.effector.effort"


def signals_table(slug: str, table: pa.Table, features: dict, unit_id: str, t_sec: np.ndarray, data_rel: str,
                  notes: list[str]) -> pa.Table:
    """Arms `left` and `right` of the Cobot Magic from one episode's parquet (channel mapping: gm100.py)."""
    n = table.num_rows
    pos = _matrix(table, COL_POS, features, data_rel)
    vel = _matrix(table, COL_VEL, features, data_rel)
    eff = _matrix(table, COL_EFFORT, features, data_rel)
    for col, m in ((COL_POS, pos), (COL_VEL, vel), (COL_EFFORT, eff)):
        if m is None:
            notes.append(f"column {col} absent: its channels are null")
    pos_sl = _arm_slices(pos, features.get(COL_POS), notes, COL_POS)
    vel_sl = _arm_slices(vel, features.get(COL_VEL), notes, COL_VEL)
    # speed_full: the arm's whole half of the velocity vector (the phase threshold was tuned on ||velocity[0:6]||)
    vel_full = {a: slice(s.start, s.start + vel.shape[1] // 2) for a, s in vel_sl.items()} if vel_sl else None
    eff_ix = {"left": 0, "right": 1} if eff is not None and eff.shape[1] == 2 else None
    if eff is not None and eff_ix is None:
        notes.append(f"{COL_EFFORT} has width {eff.shape[1]}, not 2: gripper_effort is null")
    if eff_ix is not None and _names_swapped(features.get(COL_EFFORT), 1):
        eff_ix = {"left": 1, "right": 0}

    def col(values: np.ndarray | None) -> pa.Array:
        if values is None:
            return pa.nulls(n, pa.float64())
        return pa.array(np.asarray(values, dtype=np.float64), pa.float64(), from_pandas=True)

    parts = []
    for arm in ("left", "right"):
        p = pos[:, pos_sl[arm]] if pos_sl else None
        v = vel[:, vel_sl[arm]] if vel_sl else None
        v_full = vel[:, vel_full[arm]] if vel_full else None
        parts.append(
            pa.Table.from_arrays(
                [
                    pa.array([slug] * n, pa.string()),
                    pa.array([unit_id] * n, pa.string()),
                    pa.array([arm] * n, pa.string()),
                    pa.array(np.arange(n, dtype=np.int64)),
                    pa.array(t_sec),
                    col(p[:, 0] if p is not None else None),
                    col(p[:, 1] if p is not None else None),
                    col(p[:, 2] if p is not None else None),
                    col(np.linalg.norm(v, axis=1) if v is not None else None),
                    col(eff[:, eff_ix[arm]] if eff_ix is not None else None),
                    col(None),
                    col(None),
                    col(np.linalg.norm(v_full, axis=1) if v_full is not None else None),
                ],
                schema=SIGNALS_SCHEMA,
            )
        )
    return pa.concat_tables(parts).combine_chunks()
