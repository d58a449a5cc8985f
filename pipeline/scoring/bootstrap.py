"""The scorers' one cluster bootstrap: intervals that resample split groups (items of one episode are not
independent), seeded, with the minimum-groups rule (configs/exports.yaml `score`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pipeline.settings.models import ExportsScore


def group_bootstrap(
    sums: np.ndarray, statistic, sc: ExportsScore, what: str = "split groups"
) -> tuple[list[float] | None, str | None]:
    """The one cluster bootstrap of the scorers (this MCQ scorer and the step scorer, pipeline/scoring/steps.py):
    `sums` holds one row of additive counts per split group (G x k); `statistic` maps resampled count totals (B x k)
    to B values of the metric. Percentile interval over score.bootstrap_samples resamples of the groups with
    replacement, seeded by score.seed. Returns (interval, None) or (None, why it is not estimable): fewer groups than
    score.min_ci_groups, or every resample giving the same value (never a zero-width interval)."""
    n_groups = int(sums.shape[0])
    min_groups = int(sc.min_ci_groups)
    if n_groups < min_groups:
        return None, f"not estimable: {n_groups} split group(s) < score.min_ci_groups {min_groups}"
    rng = np.random.default_rng(int(sc.seed))
    idx = rng.integers(0, n_groups, size=(int(sc.bootstrap_samples), n_groups))
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.asarray(statistic(sums[idx].sum(axis=1)), dtype=float)
    values = values[~np.isnan(values)]
    if not values.size:
        return None, f"not estimable: the metric is undefined on every resample of the {n_groups} {what}"
    a = (1 - float(sc.ci)) / 2
    lo, hi = round(float(np.quantile(values, a)), 4), round(float(np.quantile(values, 1 - a)), 4)
    if lo == hi:
        return None, f"not estimable: every resample of the {n_groups} {what} gives {lo:.4f}"
    return [lo, hi], None


def fmt(x) -> str:
    """A metric in the reports: four decimals, an en dash when it is undefined."""
    return "–" if x is None else f"{x:.4f}"


def ci_text(ci) -> str:
    """An interval in the reports: `[lo, hi]`, or n/e when too few groups make it not estimable."""
    return "n/e" if ci is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]"
