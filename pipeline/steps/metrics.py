"""The step macro-F1 and the confusion counts it is computed from: one definition for the step scorer
(pipeline/scoring/steps.py) and the blind gates of the validity audit (pipeline/steps/gates.py)."""

from __future__ import annotations

import numpy as np

CONF = ("c_c", "c_i", "i_c", "i_i")  # confusion counts: gold correct/incorrect x predicted correct/incorrect


def confusion(gold: int, pred: int) -> tuple[float, float, float, float]:
    return (
        float(gold == 1 and pred == 1),
        float(gold == 1 and pred == -1),
        float(gold == -1 and pred == 1),
        float(gold == -1 and pred == -1),
    )


def coin_counts(gold: int) -> tuple[float, float, float, float]:
    return (0.5, 0.5, 0.0, 0.0) if gold == 1 else (0.0, 0.0, 0.5, 0.5)


def macro_f1(tot: np.ndarray) -> np.ndarray:
    """Macro-F1 of confusion totals (... x 4, CONF order): classes with no gold and no predicted step left out."""
    tot = np.atleast_2d(np.asarray(tot, dtype=float))
    cc, ci, ic, ii = tot[:, 0], tot[:, 1], tot[:, 2], tot[:, 3]
    off = ci + ic
    d_c, d_i = 2 * cc + off, 2 * ii + off
    with np.errstate(invalid="ignore", divide="ignore"):
        f_c = np.where(d_c > 0, 2 * cc / np.maximum(d_c, 1e-300), np.nan)
        f_i = np.where(d_i > 0, 2 * ii / np.maximum(d_i, 1e-300), np.nan)
        return np.nanmean(np.stack([f_c, f_i], axis=1), axis=1)
