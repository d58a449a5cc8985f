"""Signal helpers shared by every label dimension: runs, masks, smoothing, window means, hysteresis."""

from __future__ import annotations

import math

import numpy as np


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _nanq(x: np.ndarray, q: float) -> float:
    """Quantile over the non-NaN values (NaN when there are none); faster than np.nanquantile."""
    v = x[~np.isnan(x)]
    return float(np.quantile(v, q)) if v.size else math.nan


def runs(mask) -> list[tuple[int, int]]:
    """Runs of True as (start, end_exclusive), in order."""
    m = np.asarray(mask, dtype=bool)
    if m.size == 0:
        return []
    d = np.diff(np.concatenate(([0], m.astype(np.int8), [0])))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def drop_short_runs(mask, min_len: int) -> np.ndarray:
    out = np.asarray(mask, dtype=bool).copy()
    for s, e in runs(out):
        if e - s < min_len:
            out[s:e] = False
    return out


def events_to_mask(n: int, events) -> np.ndarray:
    """Contact events [(contact_frame, release_frame)] -> per-frame mask, contact on [contact, release)."""
    m = np.zeros(n, dtype=bool)
    for c, r in events:
        m[max(0, c) : max(0, min(n, r))] = True
    return m


def value_runs(codes) -> list[tuple[int, int, int]]:
    """Runs of equal values as (start, end_exclusive, value)."""
    c = np.asarray(codes)
    if c.size == 0:
        return []
    cut = np.flatnonzero(c[1:] != c[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [c.size]))
    return [(int(s), int(e), c[s].item()) for s, e in zip(starts, ends)]


def derive_speed(t_sec, pos) -> np.ndarray:
    """|d pos| / d t with a backward difference (frame 0 takes frame 1's value). `pos` is (n, k), NaN where missing;
    channels that are NaN throughout are ignored. Returns NaN where a position or the clock step is unusable."""
    t = _f64(t_sec)
    p = _f64(pos)
    n = t.size
    if p.ndim == 1:
        p = p[:, None]
    keep = ~np.all(np.isnan(p), axis=0)
    p = p[:, keep]
    out = np.full(n, np.nan)
    if n < 2 or p.shape[1] == 0:
        return out
    dp = np.linalg.norm(np.diff(p, axis=0), axis=1)
    dt = np.diff(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(dt > 0, dp / dt, np.nan)
    out[1:] = v
    out[0] = v[0]
    return out


def _ffill_nan(x: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(x)
    if ok.all() or not ok.any():
        return x
    idx = np.where(ok, np.arange(x.size), -1)
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(ok))
    idx[idx < 0] = first
    return x[idx]


def ema(x, span: int, block: int = 128) -> np.ndarray:
    """Causal exponential moving average, alpha = 2 / (span + 1), y0 = x0 (no bias adjustment); a missing value
    carries the previous input forward. Vectorised in blocks (closed form of the recursion inside each block)."""
    x = _f64(x)
    if x.size == 0 or span <= 1:
        return x.copy()
    x = _ffill_nan(x)
    if np.isnan(x[0]):
        return x.copy()
    a = 2.0 / (float(span) + 1.0)
    d = 1.0 - a
    out = np.empty_like(x)
    carry = x[0]
    k = np.arange(1, block + 1, dtype=np.float64)
    dk = d**k  # d^1 .. d^B
    inv = d**-k  # d^-1 .. d^-B
    out[0] = carry  # y_0 = x_0, then blocks from index 1
    start = 1
    while start < x.size:
        end = min(x.size, start + block)
        m = end - start
        xb = x[start:end]
        acc = np.cumsum(a * xb * inv[:m])
        yb = dk[:m] * (carry + acc)
        out[start:end] = yb
        carry = yb[-1]
        start = end
    return out


def box(x, span: int) -> np.ndarray:
    """Centred moving average over `span` frames, averaging only the frames present (edges and NaNs)."""
    x = _f64(x)
    if x.size == 0 or span <= 1:
        return x.copy()
    ok = ~np.isnan(x)
    k = np.ones(int(span))
    num = np.convolve(np.where(ok, x, 0.0), k, mode="same")
    den = np.convolve(ok.astype(np.float64), k, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def smooth(x, kind: str, span: int) -> np.ndarray:
    if kind in (None, "none") or int(span) <= 1:
        return _f64(x).copy()
    if kind == "ema":
        return ema(x, int(span))
    if kind == "box":
        return box(x, int(span))
    raise ValueError(f"unknown smoothing {kind!r}")


def window_mean(x, offsets) -> np.ndarray:
    """Per frame f: mean of x[f + o] over the offsets; NaN where the window leaves the signal or meets a NaN."""
    x = _f64(x)
    n = x.size
    out = np.zeros(n)
    valid = np.ones(n, dtype=bool)
    for o in offsets:
        o = int(o)
        shifted = np.full(n, np.nan)
        if o >= 0:
            shifted[: max(0, n - o)] = x[o:]
        else:
            shifted[-o:] = x[: n + o]
        missing = np.isnan(shifted)
        valid &= ~missing
        shifted[missing] = 0.0
        out += shifted if np.isfinite(shifted).all() else np.nan_to_num(shifted, copy=False)  # nan_to_num's +-inf
    out = out / max(1, len(offsets))
    out[~valid] = np.nan
    return out


def hysteresis(x, high: float, low: float, initial: bool = False) -> np.ndarray:
    """On when x >= high, off when x < low, otherwise keep the previous state (NaN keeps it too)."""
    x = _f64(x)
    n = x.size
    code = np.full(n, -1, dtype=np.int8)
    code[x < low] = 0
    code[x >= high] = 1
    idx = np.where(code >= 0, np.arange(n), -1)
    last = np.maximum.accumulate(idx) if n else idx
    out = np.where(last >= 0, code[np.maximum(last, 0)] == 1, bool(initial))
    return out.astype(bool)
