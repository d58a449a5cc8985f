"""Parsing of RH20T's per-scene arrays: millisecond clocks, the per-camera dicts of transformed/*.npy, and nearest-
sample resampling onto the camera's frames. Errors are UnitError naming the file (`where`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from upstream_adapters.ir import UnitError


def _int_ms(values, what: str, where: str) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except Exception:  # noqa: BLE001 - any unconvertible content
        raise UnitError(f"{what} is not a list of millisecond timestamps", file=where) from None
    if arr.ndim != 1 or arr.size == 0:
        raise UnitError(f"{what} is empty or not one-dimensional", file=where)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    if arr.dtype.kind == "O":
        try:
            ints = np.array([int(v) for v in arr], dtype=np.int64)
        except (TypeError, ValueError):
            raise UnitError(f"{what} holds non-integer values", file=where) from None
        if all(float(a) == float(v) for a, v in zip(ints, arr)):
            return ints
    raise UnitError(f"{what} holds non-integer values", file=where)


def _serial_entry(obj, camera: str, rel: str, where: str):
    if not isinstance(obj, dict):
        raise UnitError(f"{rel} is not a dict keyed by camera serial", file=where)
    for key in (camera, int(camera) if camera.isdigit() else None):
        if key is not None and key in obj:
            return obj[key]
    raise UnitError(f"{rel} has no entry for camera {camera} (has {sorted(map(str, obj))[:6]})", file=where)


def _as_float(v, n: int) -> np.ndarray | None:
    """v as a float vector with at least n finite leading values, else None."""
    try:
        a = np.asarray(v, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    if a.size < n or not np.all(np.isfinite(a[:n])):
        return None
    return a


def _value_rows(raws: list, n: int) -> np.ndarray:
    """(len(raws), width) float64: row i = raws[i] as a float vector (`_as_float`), NaN where it is not one or lacks
    n >= 1 finite leading values (None never has them); width = the longest usable vector (1 when none is).

    When numpy turns all the values into one float array at once (same-length vectors: RH20T's case, ~700 samples
    per camera and file), the rows are taken from that array: the same conversion of the same numbers, without a
    Python call per sample. Anything else (a missing or odd value among vectors, ragged lengths) goes sample by
    sample."""
    try:
        block = np.asarray(raws, dtype=np.float64).reshape(len(raws), -1)
    except (TypeError, ValueError, OverflowError):
        block = None
    if block is not None:
        ok = np.all(np.isfinite(block[:, :n]), axis=1) if block.shape[1] >= n else np.zeros(len(raws), dtype=bool)
        if not ok.any():
            return np.full((len(raws), 1), np.nan)
        block[~ok] = np.nan
        return block
    vals = [_as_float(r, n) for r in raws]
    width = max((len(v) for v in vals if v is not None), default=1)
    out = np.full((len(raws), width), np.nan)
    for i, v in enumerate(vals):
        if v is not None:
            out[i, : len(v)] = v
    return out


def _samples(entries, rel: str, where: str, field: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique ms timestamps, values (m, k) with NaN where a sample lacks the field or its first n values
    are not finite) from either a list of {'timestamp': ms, field: values, ...} dicts (tcp, force_torque) or a
    {ms: {field: values, ...}} dict (gripper)."""
    if isinstance(entries, dict):
        items = list(entries.items())
    elif isinstance(entries, (list, tuple)):
        items = [(e.get("timestamp") if isinstance(e, dict) else None, e) for e in entries]
    else:
        raise UnitError(f"{rel}: per-camera data is neither a list nor a dict", file=where)
    try:  # integer timestamps throughout (RH20T's case): int() of each would give the same numbers
        keys = np.asarray([t for t, _ in items])
    except (TypeError, ValueError, OverflowError):
        keys = None
    if keys is not None and keys.dtype.kind == "i" and keys.ndim == 1:
        ts_arr = keys.astype(np.int64)
        raws = [e.get(field) if isinstance(e, dict) else None for _, e in items]
    else:  # sample by sample: a timestamp int() refuses drops its sample
        ts, raws = [], []
        for t, e in items:
            try:
                t = int(t)
            except (TypeError, ValueError):
                continue
            ts.append(t)
            raws.append(e.get(field) if isinstance(e, dict) else None)
        ts_arr = np.asarray(ts, dtype=np.int64)
    if not len(ts_arr):
        raise UnitError(f"{rel} has no timestamped samples for the primary camera", file=where)
    out = _value_rows(raws, n)
    order = np.argsort(ts_arr, kind="stable")
    ts_arr, out = ts_arr[order], out[order]
    keep = np.ones(len(ts_arr), bool)
    keep[1:] = ts_arr[1:] != ts_arr[:-1]
    return ts_arr[keep], out[keep]


def _nearest(sample_ts: np.ndarray, values: np.ndarray, query: np.ndarray, tol: float) -> np.ndarray:
    """values of the nearest sample (ties: the earlier one) within tol ms of each query time, NaN otherwise."""
    m = len(sample_ts)
    pos = np.searchsorted(sample_ts, query)
    left = np.clip(pos - 1, 0, m - 1)
    right = np.clip(pos, 0, m - 1)
    dl = np.abs(query - sample_ts[left])
    dr = np.abs(sample_ts[right] - query)
    pick = np.where(dr < dl, right, left)
    ok = np.minimum(dl, dr) <= tol
    out = values[pick].astype(np.float64)
    out[~ok] = np.nan
    return out


def _col(arr: np.ndarray) -> pa.Array:
    arr = np.asarray(arr, dtype=np.float64)
    return pa.array(arr, type=pa.float64(), mask=np.isnan(arr))
