"""Output table schemas, the column accumulator and the IR readers of the label stage."""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from pipeline.core.io import key_runs, sorted_by


_UNITS_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "camera": pl.String,
    "fps": pl.Float64,
    "num_frames": pl.Int64,
    "arm_type": pl.String,
    "primary_arm": pl.String,
    "outcome": pl.String,
    "rating": pl.Int64,
    "meta_json": pl.String,
}
_FRAMES_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "frame_index": pl.Int64,
    "phase": pl.String,
    "motion": pl.String,
    "motion_mean": pl.Float64,
    "coord": pl.String,
    "step_id": pl.Int64,
    "step_u": pl.Float64,
    "progress": pl.String,
}
_ARMS_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "arm": pl.String,
    "frame_index": pl.Int64,
    "speed": pl.Float64,
    "speed_s": pl.Float64,
    "motion": pl.String,
    "motion_mean": pl.Float64,
    "still_thr": pl.Float64,
    "move_thr": pl.Float64,
    "active": pl.Boolean,
    "contact": pl.Boolean,
    "direction": pl.String,
    "dir_mag": pl.Float64,
    "dir_purity": pl.Float64,
}
_STEPS_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "step_id": pl.Int64,
    "start_frame": pl.Int64,
    "end_frame": pl.Int64,
    "kind": pl.String,
    "arm_pattern": pl.String,
    "text": pl.String,
    "success": pl.Boolean,
}
_SEGMENTS_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "seg_index": pl.Int64,
    "text": pl.String,
    "verb": pl.String,
    "no_action": pl.Boolean,
    "start_frame": pl.Int64,
    "end_frame": pl.Int64,
    "success": pl.Boolean,
    "chain": pl.List(pl.String),
    "chain_start": pl.List(pl.Int64),
    "chain_end": pl.List(pl.Int64),
}
_PRIMITIVES_SCHEMA = {
    "source": pl.String,
    "unit_id": pl.String,
    "parent_index": pl.Int64,
    "seg_index": pl.Int64,
    "text": pl.String,
    "start_frame": pl.Int64,
    "end_frame": pl.Int64,
    "phase": pl.String,
    "contact": pl.Boolean,
    "next_text": pl.String,
    "high_text": pl.String,
    "high_verb": pl.String,
    "high_success": pl.Boolean,
}
TABLE_SCHEMAS = {
    "units": _UNITS_SCHEMA,
    "frames": _FRAMES_SCHEMA,
    "arms": _ARMS_SCHEMA,
    "steps": _STEPS_SCHEMA,
    "segments": _SEGMENTS_SCHEMA,
    "primitives": _PRIMITIVES_SCHEMA,
}
_CHANNELS = ("pos_x", "pos_y", "pos_z", "speed", "gripper_effort", "gripper_width", "force", "speed_full")


class _Cols:
    """Column accumulator: lists of numpy arrays / python values concatenated once at the end."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.parts: dict[str, list] = {k: [] for k in schema}

    def add(self, **cols):
        n = None
        for v in cols.values():
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
        """The table, sorted by `sort` (a key: no ties). Each column's parts are freed once it is built, and rows
        that come already in order (the driver adds units in order) are not copied by a sort."""
        data = {}
        for k, dtype in self.schema.items():
            chunks, self.parts[k] = self.parts[k], []
            if not chunks:
                data[k] = pl.Series(k, [], dtype=dtype)
                continue
            if dtype in (pl.Float64, pl.Int64, pl.Boolean) and all(
                isinstance(c, np.ndarray) and c.dtype != object for c in chunks
            ):
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
        df = pl.DataFrame(data)
        del data
        return sorted_by(df, sort)


def _codes_to_str(codes: np.ndarray, names) -> np.ndarray:
    out = np.full(codes.size, None, dtype=object)
    for i, name in enumerate(names):
        out[codes == i] = name
    return out


def _unit_signal_arrays(ir, unit_nframes: dict[str, int]) -> dict[str, dict[str, dict]]:
    """unit_id -> arm -> {t_sec, channel arrays (length num_frames, NaN where missing)}, from the IR's signals table
    (read here, from a lazy `ir` mapping, so only the arrays outlive the call)."""
    signals = ir.get("signals")
    if signals is None or signals.height == 0:
        return {}
    absent = [c for c in _CHANNELS if c not in signals.columns]  # IR written before a channel existed: all null
    signals = signals.with_columns([pl.lit(None, pl.Float64).alias(c) for c in absent]) if absent else signals
    sig = sorted_by(
        signals.select(["unit_id", "arm", "frame_index", "t_sec", *_CHANNELS]), ["unit_id", "arm", "frame_index"]
    )
    del signals
    sig = sig.with_columns([pl.col(c).cast(pl.Float64).fill_null(np.nan) for c in ("t_sec", *_CHANNELS)])
    fi = sig.get_column("frame_index").to_numpy()
    arrays = {c: sig.get_column(c).to_numpy() for c in ("t_sec", *_CHANNELS)}
    out: dict[str, dict[str, dict]] = {}
    for u, a, s, e in key_runs(sig, ["unit_id", "arm"]):
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
