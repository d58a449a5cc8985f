"""Motion-state dimension (T6): moving / stationary from the smoothed speed around a frame."""

from __future__ import annotations

import math

import numpy as np

from .signals import _f64


def _absolute(speed_s, spec: dict) -> tuple[float, float]:
    return float(spec["stationary"]), float(spec["moving"])


def _quantile(speed_s, spec: dict) -> tuple[float, float]:
    s = _f64(speed_s)
    s = s[~np.isnan(s)]
    if s.size == 0:
        return math.nan, math.nan
    lo = max(float(np.quantile(s, spec["stationary_q"])), float(spec["stationary_floor"]))
    hi = max(float(np.quantile(s, spec["moving_q"])), float(spec["moving_floor"]))
    return lo, max(hi, lo)


# labels.motion.<source>.mode -> thresholds: fixed, or per unit and arm from quantiles of the smoothed speed
MOTION_MODES = {"absolute": _absolute, "quantile": _quantile}


def motion_thresholds(speed_s, spec: dict) -> tuple[float, float]:
    """(stationary, moving) thresholds of one arm under labels.motion.<source>."""
    if spec["mode"] not in MOTION_MODES:
        raise ValueError(f"labels.motion: unknown threshold mode {spec['mode']!r}")
    return MOTION_MODES[spec["mode"]](speed_s, spec)


def classify_motion(mean_speed, stationary: float, moving: float):
    """'moving' when >= moving, 'stationary' when <= stationary, None between (or NaN). Scalars or arrays."""
    m = _f64(mean_speed)
    out = np.full(m.shape, None, dtype=object)
    out[m >= moving] = "moving"
    out[m <= stationary] = "stationary"
    return out.item() if out.ndim == 0 else out
