"""Direction dimension (T3): image-plane motion direction of an arm over a short window.

A mapping (per source, camera and arm, configs/labels.yaml labels.direction) names for each image direction the IR
position channel and sign that move the arm that way in the image. The dominant axis is taken over every configured
axis of the source (labels.direction.<source>.axes, mapped or not, e.g. the third axis pos_z): a window dominated by an
axis, or an axis sign, that the mapping does not name is not labelled (public calibration: filtered buckets, such as
the GM-100 right arm's +-x)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .signals import _f64

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

DIRECTIONS = ("left", "right", "up", "down")


def _classify(d: np.ndarray, axes: list, mapping: dict, min_delta: float, purity_ratio: float):
    """d: (n_axes, n) net displacement per axis. Returns (label object array, dominant |d|, purity, dominant axis
    index, dominant sign, ok mask before the consistency check). An axis NaN throughout (absent) is ignored; a NaN
    on a present axis leaves the window unlabelled."""
    ad = np.abs(d)
    n = d.shape[1]
    present = ~np.all(np.isnan(ad), axis=1)
    valid = ~np.isnan(ad[present]).any(axis=0) if present.any() else np.zeros(n, dtype=bool)
    ad0 = np.where(np.isnan(ad) | ~present[:, None], -1.0, ad)
    dom = np.argmax(ad0, axis=0)
    dom_mag = ad0[dom, np.arange(n)]
    other = (
        np.where(np.arange(len(axes))[:, None] == dom[None, :], -1.0, ad0).max(axis=0) if len(axes) > 1 else np.zeros(n)
    )
    other = np.maximum(other, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        purity = np.where(other > 0, dom_mag / np.maximum(other, 1e-12), np.inf)
    dom_sign = np.sign(d[dom, np.arange(n)])
    ok = valid & (dom_mag >= min_delta) & (purity >= purity_ratio)
    labels = np.full(n, None, dtype=object)
    lookup = {(m["axis"], int(np.sign(m["sign"]))): name for name, m in mapping.items()}
    for i, a in enumerate(axes):
        for sgn in (1, -1):
            if (a, sgn) in lookup:
                labels[ok & (dom == i) & (dom_sign == sgn)] = lookup[(a, sgn)]
    return labels, dom_mag, purity, dom, dom_sign


def direction_labels(
    pos: dict,
    offsets,
    mapping: dict,
    *,
    min_delta: float,
    purity_ratio: float,
    consistent: bool,
    consistency_tolerance: float,
    axes=None,
):
    """Image-plane motion direction per anchor frame over the window `offsets` (first to last).

    `pos` maps an IR position channel (pos_x, ...) to its per-frame array; `mapping` maps an image direction
    (left/right/up/down) to {axis, sign}: moving that way in the image is a positive `sign * d axis`. The dominant
    axis (largest |d|) among `axes` (default: the mapped axes) gives the direction when |d| >= min_delta,
    |d| / (largest other |d|) >= purity_ratio, the (axis, sign) is mapped, and (if consistent) no step between
    consecutive window frames goes against it by more than consistency_tolerance * |d|.
    Returns (labels object array, magnitude, purity)."""
    offsets = [int(o) for o in offsets]
    axes = list(axes) if axes else sorted({m["axis"] for m in mapping.values()})
    n = len(next(iter(pos.values()))) if pos else 0
    mag = np.full(n, np.nan)
    pur = np.full(n, np.nan)
    if n == 0 or not mapping:
        return np.full(n, None, dtype=object), mag, pur

    def diff(x, o1, o2):
        """x[f + o2] - x[f + o1] per frame f; NaN where either leaves the unit (a window wider than the unit leaves
        every frame without a partner)."""
        out = np.full(n, np.nan)
        lo, hi = max(0, -o1, -o2), min(n, n - o1, n - o2)
        if hi > lo:
            np.subtract(x[lo + o2 : hi + o2], x[lo + o1 : hi + o1], out=out[lo:hi])
        return out

    deltas, steps = [], []
    for a in axes:
        x = _f64(pos[a]) if a in pos else np.full(n, np.nan)
        deltas.append(diff(x, offsets[0], offsets[-1]))
        steps.append([diff(x, o1, o2) for o1, o2 in zip(offsets[:-1], offsets[1:])])
    labels, dom_mag, purity, dom, dom_sign = _classify(np.vstack(deltas), axes, mapping, min_delta, purity_ratio)
    if consistent and len(offsets) > 2:
        for i in range(len(axes)):
            sel = (labels != None) & (dom == i)  # noqa: E711 (object array)
            for st in steps[i]:
                against = -dom_sign * st  # positive when the step goes against the net direction
                labels[sel & ((against > consistency_tolerance * dom_mag) | np.isnan(against))] = None
    has = labels != None  # noqa: E711 (object array, elementwise)
    mag[has] = dom_mag[has]
    pur[has] = np.minimum(purity[has], 1e6)
    return labels, mag, pur


def direction_mapping(cfg: Settings, source: str, camera: str, arm: str) -> dict:
    """The (source, camera, arm) image-direction mapping of configs/labels.yaml ({} when the arm has none)."""
    spec = cfg.labels.direction.for_source(source).model_dump()
    if spec["method"] == "none":
        return {}
    return dict(spec["mapping"].get(camera, {}).get(arm) or {})


def direction_label(
    source: str, camera: str, arm: str, dx: float, dy: float, dz: float | None = None, *, cfg: Settings
) -> str | None:
    """Image direction of one net displacement (dx, dy, dz along pos_x, pos_y, pos_z) of `arm` seen by `camera`,
    under the configured mapping, min_delta and purity (no window: no consistency check); None when the motion is
    too small, not pure, or dominated by an axis or sign the mapping does not name (dz None: no third axis)."""
    spec = cfg.labels.direction.for_source(source)
    mp = direction_mapping(cfg, source, camera, arm)
    if not mp:
        return None
    axes = list(spec.axes)
    val = {"pos_x": dx, "pos_y": dy, "pos_z": dz}
    d = np.array([[np.nan if val[a] is None else float(val[a])] for a in axes])
    labels, *_ = _classify(d, axes, mp, float(spec.min_delta), float(cfg.labels.direction.purity_ratio))
    return labels[0]


# ------------------------------------------------------------------------------------------ per-source methods


def _direction_image_axes(pos: dict, camera: str, arm: str, spec: dict, common: dict):
    """Direction labels of one arm from its (camera, arm) mapping; an arm without a mapping gets none."""
    n = len(next(iter(pos.values()))) if pos else 0
    mp = spec["mapping"].get(camera, {}).get(arm)
    if not mp:
        return np.full(n, None, object), np.full(n, np.nan), np.full(n, np.nan)
    return direction_labels(
        pos,
        spec["offsets"],
        mp,
        min_delta=float(spec["min_delta"]),
        purity_ratio=float(common["purity_ratio"]),
        consistent=bool(spec["consistent"]),
        consistency_tolerance=float(common["consistency_tolerance"]),
        axes=spec["axes"],
    )


def _direction_none(pos: dict, camera: str, arm: str, spec: dict, common: dict):
    n = len(next(iter(pos.values()))) if pos else 0
    return np.full(n, None, object), np.full(n, np.nan), np.full(n, np.nan)


DIRECTION_METHODS = {"image_axes": _direction_image_axes, "none": _direction_none}
