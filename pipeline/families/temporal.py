"""T8 Temporal Ordering (three labelled frames) and T9 Temporal Priority Prediction (two labelled panels).

Frames come from one unit: `grid` mode takes anchors every `step_sec` seconds (clear of `margin_frac` at both ends),
combines grid points at most `max_gap_steps` apart and at least `min_sep_sec` apart, and (with
`require_motion_between`) refuses two frames with nothing but stationary frames between them; `segment_midpoints`
mode (REASSEMBLE) takes the midpoints of successful high-level action segments, `gaps` segments apart and at least
`min_sep_sec` apart. `min_sep_sec` is the per-source minimum temporal gap between consecutive frames.
A time gap alone does not make a visible change, so `state_change: contact` keeps only sets whose consecutive frames
lie in different contact runs (before the grasp / held / after the release: `contact_runs`; a unit without contact
labels gives no set), never inside one interval; `state_change: pixels` leaves it to the frames stage's gate
(the template's `min_pixel_distance`, which applies to every T8/T9 item). Units whose camera is in
`exclude_cameras` (wrist views) give no item.

The display order is a seeded shuffle of the chronological order; the display labels (X, Y[, Z]) are fixed in
display order, so the answer is the permutation of labels in time order (T8) or the label of the earlier panel (T9).
pipeline.items.choices.display_order later re-orders the frames to balance the true option (`choice_order: canonical`)."""

from __future__ import annotations

import itertools

import numpy as np

from pipeline.core.seeding import py_rng

from .common import Pool, Rule, Spec, evenly, order_distractors, permutations_of
from .context import Context


def answer_for(display_frames: list[int], labels: list[str]) -> str:
    """The labels of the displayed frames in chronological order (T8: a permutation string; T9: one label)."""
    order = sorted(range(len(display_frames)), key=lambda i: (display_frames[i], i))
    return "".join(labels[i] for i in order)


def contact_runs(contact_by_arm: list) -> np.ndarray | None:
    """Per frame, the index of its contact run: the state "some arm in contact" (null counts as no contact) changes
    at each run boundary, so two frames with different indices have a grasp or a release between them. None when no
    arm has a contact label."""
    arrs = [
        np.array([x is True or x == 1 for x in c], dtype=bool) for c in contact_by_arm if any(x is not None for x in c)
    ]
    if not arrs:
        return None
    state = np.logical_or.reduce(arrs)
    return np.concatenate(([0], np.cumsum(state[1:] != state[:-1])))


def _unit_runs(ctx: Context, uid: str) -> np.ndarray | None:
    return contact_runs([d["contact"] for _, d in sorted((ctx.arms.get(uid) or {}).items())])


def _gap_table(k: int, gmax: int) -> np.ndarray:
    """All (k-1)-tuples of grid gaps in 1..gmax, as cumulative offsets from the first grid point: (m, k)."""
    gaps = np.array(list(itertools.product(range(1, gmax + 1), repeat=k - 1)), dtype=np.int64).reshape(-1, k - 1)
    return np.concatenate([np.zeros((gaps.shape[0], 1), dtype=np.int64), np.cumsum(gaps, axis=1)], axis=1)


def _grid_sets(
    ctx: Context, uid: str, fcfg: dict, k: int, require_motion: bool, rules: dict[str, Rule] | None = None
) -> list[tuple[int, ...]]:
    """The unit's frame sets on the grid; `rules` (by template key) count the sets each rule leaves out."""
    rules = rules or {}

    def count(name: str, before, after) -> None:
        if name in rules:
            rules[name].count(int(np.count_nonzero(before)), int(np.count_nonzero(before & ~after)))

    n, fps = ctx.n(uid), ctx.fps(uid)
    step = max(1, int(round(float(fcfg["step_sec"]) * fps)))
    min_sep = max(1, int(round(float(fcfg["min_sep_sec"]) * fps)))
    margin = int(round(float(fcfg.get("margin_frac", 0.0)) * (n - 1)))
    grid = np.arange(margin, n - margin, step, dtype=np.int64)
    if grid.size < k:
        return []
    offs = _gap_table(k, int(fcfg.get("max_gap_steps", 1)))  # (m, k)
    idx = np.arange(grid.size)[:, None, None] + offs[None, :, :]  # (g, m, k)
    idx = idx.reshape(-1, k)
    idx = idx[idx[:, -1] < grid.size]
    f = grid[idx]  # (c, k) frames, increasing
    keep = np.all(np.diff(f, axis=1) >= min_sep, axis=1)
    count("min_sep_sec", np.ones(len(f), dtype=bool), keep)
    if require_motion:
        moving = np.concatenate(([0], np.cumsum(~ctx.stationary(uid))))
        before = keep.copy()
        for j in range(k - 1):
            keep &= (moving[f[:, j + 1] + 1] - moving[f[:, j]]) > 0
        count("require_motion_between", before, keep)
    runs = fcfg.get("_runs")
    if runs is not None:  # consecutive frames in different contact runs
        before = keep.copy()
        keep &= np.all(np.diff(runs[f], axis=1) != 0, axis=1)
        count("state_change", before, keep)
    f = f[keep]  # rows are in lexicographic order
    cap = fcfg.get("_cap")
    if cap is not None:
        count("cap_per_unit", np.ones(f.shape[0], dtype=bool), np.arange(f.shape[0]) < int(cap))
    if cap is not None and f.shape[0] > cap:
        f = f[[i for i in evenly(list(range(f.shape[0])), int(cap))]]
    return [tuple(row) for row in f.tolist()]


def _segment_sets(ctx: Context, uid: str, fcfg: dict, k: int) -> list[tuple[int, ...]]:
    mids = [
        (int(s["start_frame"]) + int(s["end_frame"])) // 2
        for s in ctx.segments.get(uid, [])
        if not s["no_action"] and s["success"]
    ]
    mids = sorted(set(m for m in mids if 0 <= m < ctx.n(uid)))
    min_sep = max(1, int(round(float(fcfg["min_sep_sec"]) * ctx.fps(uid))))
    out = set()
    for i in range(len(mids)):
        for gaps in itertools.product([int(g) for g in fcfg["gaps"]], repeat=k - 1):
            idx = [i]
            for g in gaps:
                idx.append(idx[-1] + g)
            if idx[-1] < len(mids):
                f = [mids[j] for j in idx]
                if all(b - a >= min_sep for a, b in zip(f, f[1:])):  # the minimum temporal gap, as in grid mode
                    out.add(tuple(f))
    return sorted(out)


def _set_rules(spec: Spec, ctx: Context, k: int) -> dict[str, Rule]:
    """The rules a family's frame sets pass, by template key (min_sep_sec, require_motion_between, state_change,
    cap_per_unit), and those that leave out whole units (exclude_cameras, contact)."""
    sets, unit = f"sets of {k} frames", spec.unit_word
    fcfg = spec.frames
    return {
        "exclude_cameras": spec.rule("exclude_cameras", "exclude_cameras", f"{unit}s", "came from an excluded camera"),
        "contact": spec.rule(
            "state_change",
            "frames.state_change",
            f"{unit}s",
            "had no contact label to place a grasp or release between frames",
        ),
        "min_sep_sec": spec.rule(
            "min_sep_sec", "frames.min_sep_sec", sets, f"had two frames closer than {fcfg.get('min_sep_sec')} s"
        ),
        "require_motion_between": spec.rule(
            "require_motion_between",
            "require_motion_between",
            sets,
            "had only stationary frames between two of their frames",
        ),
        "state_change": spec.rule(
            "state_change",
            "frames.state_change",
            sets,
            "had two consecutive frames with no grasp or release between them",
        ),
        "cap_per_unit": spec.rule(
            "cap_per_unit",
            "candidates.cap_per_unit",
            sets,
            f"lay past the cap of {spec.cap('cap_per_unit', len(ctx.unit_ids)) or 0:,} per {unit}",
        ),
    }


def _frame_sets(spec: Spec, ctx: Context, uid: str, k: int, rules: dict[str, Rule]) -> list[tuple[int, ...]]:
    fcfg = spec.frames
    mode = fcfg.get("mode", "grid")
    cap = spec.cap("cap_per_unit", len(ctx.unit_ids))
    excluded = ctx.units[uid]["camera"] in set(spec.get("exclude_cameras") or ())
    rules["exclude_cameras"].count(1, excluded)
    if excluded:
        return []
    runs = None
    if fcfg.get("state_change") == "contact":
        runs = _unit_runs(ctx, uid)
        rules["contact"].count(1, runs is None)
        if runs is None:
            return []
    if mode == "grid":
        sets = _grid_sets(
            ctx, uid, {**fcfg, "_cap": cap, "_runs": runs}, k, bool(spec.get("require_motion_between", False)), rules
        )
    elif mode == "segment_midpoints":
        sets = _segment_sets(ctx, uid, fcfg, k)
        if runs is not None:
            kept = [f for f in sets if all(runs[a] != runs[b] for a, b in zip(f, f[1:]))]
            rules["state_change"].count(len(sets), len(sets) - len(kept))
            sets = kept
        if cap is not None:  # (grid mode caps its sets itself)
            rules["cap_per_unit"].count(len(sets), max(0, len(sets) - int(cap)))
    else:
        raise ValueError(f"{spec.task_id}: unknown frame mode {mode!r}")
    return evenly(sorted(sets), cap)


def _ordering(spec: Spec, ctx: Context, k: int):
    pool = Pool(spec, ctx.units)
    labels = list(spec.get("display_labels"))
    rules = _set_rules(spec, ctx, k)
    for uid in ctx.unit_ids:
        for chrono in _frame_sets(spec, ctx, uid, k, rules):
            key = "f" + "-".join(str(f) for f in chrono)
            ckey = f"{spec.task_id}|{spec.source}|{uid}|{key}"
            order = list(range(k))
            py_rng(spec.seed, "display", ckey).shuffle(order)
            disp = [chrono[i] for i in order]
            ans = answer_for(disp, labels)
            if k == 2:
                ans = ans[0]  # T9: the label of the earlier panel
            if k == 3:
                dis = order_distractors(spec, ans, ckey)
            else:
                dis = [x for x in labels if x != ans][: spec.num_choices - 1]
            pool.add(
                uid,
                key,
                ans,
                disp,
                chrono[len(chrono) // 2],
                answer_text=ans,
                distractors=dis,
                display_labels=labels,
                meta={"chronological": list(chrono)},
            )
    return pool.frame()


def t8_ordering(spec: Spec, ctx: Context):
    return _ordering(spec, ctx, 3)


def t9_priority(spec: Spec, ctx: Context):
    return _ordering(spec, ctx, 2)


def canonical_choices(spec_cfg: dict) -> list[str]:
    """The fixed option list of a `choice_order: canonical` family: T8 the permutations of its display labels in
    lexicographic order, T9 the display labels."""
    labels = list(spec_cfg["display_labels"])
    n = int(spec_cfg["num_choices"])
    if n == len(labels):
        return labels
    perms = permutations_of(labels)
    if len(perms) != n:
        raise ValueError(f"{spec_cfg.get('task_id')}: {n} choices but {len(perms)} permutations")
    return perms
