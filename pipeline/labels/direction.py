"""Direction dimension (T3): image-plane motion direction of an arm over a short window."""

from __future__ import annotations

import numpy as np

from .signals import _f64

DIRECTIONS = ("left", "right", "up", "down")


def direction_labels(pos: dict, offsets, mapping: dict, *, min_delta: float, purity_ratio: float,
                     consistent: bool = True, consistency_tolerance: float = 0.25):
    """Image-plane motion direction per anchor frame over the window `offsets` (first to last).

    `pos` maps an IR position channel (pos_x, ...) to its per-frame array; `mapping` maps an image direction
    (left/right/up/down) to {axis, sign}: moving that way in the image is a positive `sign * d axis`. The dominant
    axis (largest |d|) among the mapped axes gives the direction when |d| >= min_delta, |d| / (largest other |d|)
    >= purity_ratio, the (axis, sign) is mapped, and (if consistent) no step between consecutive window frames goes
    against it by more than consistency_tolerance * |d|. Returns (labels object array, magnitude, purity)."""
    offsets = [int(o) for o in offsets]
    axes = sorted({m["axis"] for m in mapping.values()})
    n = len(next(iter(pos.values()))) if pos else 0
    labels = np.full(n, None, dtype=object)
    mag = np.full(n, np.nan)
    pur = np.full(n, np.nan)
    if n == 0 or not axes:
        return labels, mag, pur

    def shifted(x, o):
        out = np.full(n, np.nan)
        if o >= 0:
            out[: max(0, n - o)] = x[o:]
        else:
            out[-o:] = x[: n + o]
        return out

    deltas = []
    steps = []
    for a in axes:
        x = _f64(pos.get(a, np.full(n, np.nan)))
        pts = [shifted(x, o) for o in offsets]
        deltas.append(pts[-1] - pts[0])
        steps.append([b - a_ for a_, b in zip(pts[:-1], pts[1:])])
    d = np.vstack(deltas)  # (n_axes, n)
    ad = np.abs(d)
    valid = ~np.isnan(ad).any(axis=0)
    ad0 = np.where(np.isnan(ad), -1.0, ad)
    dom = np.argmax(ad0, axis=0)
    dom_mag = ad0[dom, np.arange(n)]
    if len(axes) > 1:
        other = np.where(np.arange(len(axes))[:, None] == dom[None, :], -1.0, ad0).max(axis=0)
    else:
        other = np.zeros(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        purity = np.where(other > 0, dom_mag / np.maximum(other, 1e-12), np.inf)
    dom_sign = np.sign(d[dom, np.arange(n)])
    ok = valid & (dom_mag >= min_delta) & (purity >= purity_ratio)
    if consistent and len(offsets) > 2:
        for i, a in enumerate(axes):
            sel = ok & (dom == i)
            if not sel.any():
                continue
            for st in steps[i]:
                against = -dom_sign * st  # positive when the step goes against the net direction
                bad = sel & ((against > consistency_tolerance * dom_mag) | np.isnan(against))
                ok &= ~bad
    lookup = {(m["axis"], int(np.sign(m["sign"]))): name for name, m in mapping.items()}
    for i, a in enumerate(axes):
        for sgn in (1, -1):
            name = lookup.get((a, sgn))
            sel = ok & (dom == i) & (dom_sign == sgn)
            if name is not None:
                labels[sel] = name
    has = np.array([x is not None for x in labels], dtype=bool)
    mag[has] = dom_mag[has]
    pur[has] = np.minimum(purity[has], 1e6)
    return labels, mag, pur


# ------------------------------------------------------------------------------------------ per-source methods


def _direction_image_axes(pos: dict, camera: str, arm: str, spec: dict, common: dict):
    """Direction labels of one arm from its (camera, arm) mapping; an arm without a mapping gets none."""
    n = len(next(iter(pos.values()))) if pos else 0
    mp = spec["mapping"].get(camera, {}).get(arm)
    if not mp:
        return np.full(n, None, object), np.full(n, np.nan), np.full(n, np.nan)
    return direction_labels(pos, spec["offsets"], mp, min_delta=float(spec["min_delta"]),
                            purity_ratio=float(common["purity_ratio"]), consistent=bool(spec["consistent"]),
                            consistency_tolerance=float(common["consistency_tolerance"]))


def _direction_none(pos: dict, camera: str, arm: str, spec: dict, common: dict):
    n = len(next(iter(pos.values()))) if pos else 0
    return np.full(n, None, object), np.full(n, np.nan), np.full(n, np.nan)


DIRECTION_METHODS = {"image_axes": _direction_image_axes, "none": _direction_none}
