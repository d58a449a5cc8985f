"""compute_labels: apply each label dimension's per-source method (configs/labels.yaml) to one source partition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import math

import numpy as np
import polars as pl

from .contact import CONTACT_METHODS
from .coordination import COORD_STATES, activity_mask, arm_type_from_activity, coordination_codes, stable_codes
from .direction import DIRECTION_METHODS
from .motion import classify_motion, motion_thresholds
from .outcome import OUTCOME_METHODS
from .phase import PHASE_METHODS, PHASE_NULL
from .segments import segment_pass
from .signals import derive_speed, smooth, window_mean
from .steps import STEP_METHODS, progress_bin, progress_u
from .tables import TABLE_SCHEMAS, _Cols, _codes_to_str, _segments_by_unit, _unit_signal_arrays

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

_KEYS = {
    "units": ["unit_id"],
    "frames": ["unit_id", "frame_index"],
    "arms": ["unit_id", "arm", "frame_index"],
    "steps": ["unit_id", "step_id"],
    "segments": ["unit_id", "seg_index"],
    "primitives": ["unit_id", "parent_index", "seg_index"],
}


def source_spec(L: dict, section: str, source: str) -> dict:
    """labels.<section>.<source>: every source has an entry in every section (method `none` where it has no rule)."""
    try:
        return L[section][source]
    except KeyError:
        raise KeyError(
            f"configs/labels.yaml: labels.{section}.{source} is missing (give method: none if the source "
            f"has no {section} rule)"
        ) from None


def _method(table: dict, section: str, source: str, name: str):
    if name not in table:
        raise ValueError(
            f"configs/labels.yaml: labels.{section}.{source}: unknown method {name!r} (known: {sorted(table)})"
        )
    return table[name]


def _arm_type(u: dict, spec: dict, active: dict, arm_names: list, bimanual: bool):
    if spec["method"] == "activity" and bimanual:
        return arm_type_from_activity(
            active["left"],
            active["right"],
            min_active_share=spec["min_active_share"],
            sync_overlap=spec["sync_overlap"],
        )
    if u.get("arm_layout") == "single_arm" or arm_names == ["single"]:
        return "single_arm", "single"
    return None, ("both" if bimanual else (arm_names[0] if arm_names else None))


def compute_labels(source: str, ir: dict[str, pl.DataFrame], cfg: Settings) -> dict[str, pl.DataFrame]:
    """Apply the label rules to one source partition of the IR (see the package docstring for the tables)."""
    L = cfg.labels.model_dump()  # the label rules read their section as plain values (one place: here)
    phases = list(L["phases"])
    bins = L["progress_bins"]
    speed_spec = source_spec(L, "speed", source)
    contact_spec = source_spec(L, "contact", source)
    phase_spec = source_spec(L, "phase", source)
    phase_channel = phase_spec.get("speed_channel", "speed")
    motion_spec = source_spec(L, "motion", source)
    motion_window = list(L["motion"]["window"])
    activity_spec = source_spec(L, "activity", source)
    armtype_spec = source_spec(L, "arm_type", source)
    dir_spec = source_spec(L, "direction", source)
    steps_spec = source_spec(L, "steps", source)
    outcome_spec = source_spec(L, "outcome", source)
    contact_fn = _method(CONTACT_METHODS, "contact", source, contact_spec["method"])
    phase_fn = _method(PHASE_METHODS, "phase", source, phase_spec["method"])
    dir_fn = _method(DIRECTION_METHODS, "direction", source, dir_spec["method"])
    steps_fn = _method(STEP_METHODS, "steps", source, steps_spec["method"])
    outcome_fn = _method(OUTCOME_METHODS, "outcome", source, outcome_spec["method"])
    has_motion = motion_spec["mode"] != "none"
    has_activity = activity_spec["mode"] != "none"

    units_ir = ir["units"].sort("unit_id")
    unit_rows = [r for r in units_ir.iter_rows(named=True) if r["source"] == source]
    nframes = {r["unit_id"]: int(r["num_frames"]) for r in unit_rows}
    sig = _unit_signal_arrays(ir, nframes)
    segs = _segments_by_unit(ir.get("segments"))

    T = {name: _Cols(schema) for name, schema in TABLE_SCHEMAS.items()}

    for u in unit_rows:
        uid, n = u["unit_id"], int(u["num_frames"])
        arms = sig.get(uid, {})
        arm_names = sorted(arms)
        bimanual = {"left", "right"} <= set(arm_names)
        meta: dict = {}
        fidx = np.arange(n, dtype=np.int64)

        # ---- speed per arm: native when the IR has it, else derived from positions; then smoothed. The phase rule
        # may read another channel (phase.<source>.speed_channel, e.g. GM-100 speed_full), the same way.
        speed, speed_s, phase_speed_s = {}, {}, {}
        for a in arm_names:
            d = arms[a]
            v = d["speed"]
            if np.all(np.isnan(v)):
                v = derive_speed(d["t_sec"], np.column_stack([d["pos_x"], d["pos_y"], d["pos_z"]]))
            speed[a] = v
            speed_s[a] = smooth(v, speed_spec["smooth"], int(speed_spec["span"]))
            pv = d[phase_channel] if phase_channel != "speed" else v
            phase_speed_s[a] = (
                speed_s[a]
                if pv is v or np.all(np.isnan(pv))
                else smooth(pv, speed_spec["smooth"], int(speed_spec["span"]))
            )

        # ---- activity, coordination, arm type
        active: dict[str, np.ndarray] = {}
        coord = np.full(n, -1, dtype=np.int8)
        if has_activity and bimanual:
            for a in ("left", "right"):
                active[a], meta[f"activity_{a}"] = activity_mask(speed[a], activity_spec)
            coord = stable_codes(
                coordination_codes(active["left"], active["right"]),
                int(activity_spec["transition_margin"]),
                int(activity_spec["min_stable_run"]),
            )
        arm_type, primary = _arm_type(u, armtype_spec, active, arm_names, bimanual)

        def acting_speed(by_arm: dict[str, np.ndarray] = speed_s) -> np.ndarray:
            """Smoothed speed of the acting arm (bimanual: the faster arm), for phases and step merging."""
            if primary in by_arm:
                return by_arm[primary]
            if primary == "both" and bimanual:
                return np.fmax(by_arm["left"], by_arm["right"])
            return by_arm[arm_names[0]] if arm_names else np.full(n, np.nan)

        # ---- motion per arm (+ unit-level: one arm, or bimanual combined as configured)
        motion_arm, mmean_arm, thr_arm = {}, {}, {}
        for a in arm_names:
            if has_motion:
                still, move = motion_thresholds(speed_s[a], motion_spec)
                mm = window_mean(speed_s[a], motion_window)
                motion_arm[a], mmean_arm[a], thr_arm[a] = classify_motion(mm, still, move), mm, (still, move)
            else:
                motion_arm[a], mmean_arm[a], thr_arm[a] = np.full(n, None, object), np.full(n, np.nan), (np.nan, np.nan)
        unit_motion, unit_mmean = np.full(n, None, object), np.full(n, np.nan)
        if len(arm_names) == 1:
            unit_motion, unit_mmean = motion_arm[arm_names[0]], mmean_arm[arm_names[0]]
        elif bimanual and has_motion and motion_spec["combine"] == "max" and motion_spec["mode"] == "absolute":
            unit_mmean = np.fmax(mmean_arm["left"], mmean_arm["right"])
            unit_motion = classify_motion(unit_mmean, *thr_arm["left"])

        # ---- contact per arm (signal methods); the segment pass gives the primitive-label contact
        contact_arm, events_by_arm = contact_fn(u, arms, arm_names, primary, n, contact_spec, meta)
        phase_codes = np.full(n, PHASE_NULL, dtype=np.int8)
        seg_steps, segment_contact = segment_pass(
            source,
            uid,
            segs.get(uid, {"high": [], "low": {}}),
            n,
            phases,
            phase_spec,
            contact_spec,
            steps_spec,
            phase_codes,
            T,
        )

        # ---- phase
        evs = [e for lst in events_by_arm.values() for e in lst]
        phase_codes = phase_fn(n, evs, acting_speed(phase_speed_s), phase_codes, bool(arm_names), phase_spec)

        # ---- local steps and progress
        steps = steps_fn(
            {
                "events_by_arm": events_by_arm,
                "acting_speed": acting_speed(),
                "arm_names": arm_names,
                "contact_arm": contact_arm,
                "speed_s": speed_s,
                "n": n,
                "segment_steps": seg_steps,
            },
            steps_spec,
        )
        step_id = np.full(n, -1, dtype=np.int64)
        step_u = np.full(n, np.nan)
        for k, s in enumerate(sorted(steps, key=lambda s: (s["start"], s["end"]))):
            a, b = max(0, s["start"]), min(n - 1, s["end"])
            if b <= a:
                continue
            step_id[a : b + 1] = k
            step_u[a : b + 1] = progress_u(np.arange(a, b + 1), s["start"], s["end"])
            T["steps"].add(
                source=source,
                unit_id=uid,
                step_id=k,
                start_frame=int(s["start"]),
                end_frame=int(s["end"]),
                kind=s["kind"],
                arm_pattern=s["arm_pattern"],
                text=s["text"],
                success=s["success"],
            )
        prog = progress_bin(step_u, bins) if n else np.array([], dtype=object)

        # ---- direction per arm
        dirs = {
            a: dir_fn({c: arms[a][c] for c in ("pos_x", "pos_y", "pos_z")}, u["camera"], a, dir_spec, L["direction"])
            for a in arm_names
        }

        # ---- outcome
        outcome = outcome_fn(u, outcome_spec)

        # ---- emit
        for a in arm_names:
            c = contact_arm.get(a)
            if a == "single" and segment_contact is not None:
                c = segment_contact
            T["arms"].add(
                source=source,
                unit_id=uid,
                arm=a,
                frame_index=fidx,
                speed=speed[a],
                speed_s=speed_s[a],
                motion=motion_arm[a],
                motion_mean=mmean_arm[a],
                still_thr=np.full(n, thr_arm[a][0]),
                move_thr=np.full(n, thr_arm[a][1]),
                active=(active[a] if a in active else np.full(n, None, object)),
                contact=(c if c is not None else np.full(n, None, object)),
                direction=dirs[a][0],
                dir_mag=dirs[a][1],
                dir_purity=dirs[a][2],
            )
        T["frames"].add(
            source=source,
            unit_id=uid,
            frame_index=fidx,
            phase=_codes_to_str(phase_codes, phases),
            motion=unit_motion,
            motion_mean=unit_mmean,
            coord=_codes_to_str(coord, COORD_STATES),
            step_id=np.array([int(x) if x >= 0 else None for x in step_id], dtype=object),
            step_u=step_u,
            progress=prog,
        )
        for a in arm_names:
            meta[f"motion_{a}"] = [None if math.isnan(x) else round(float(x), 6) for x in thr_arm[a]]
        T["units"].add(
            source=source,
            unit_id=uid,
            camera=u["camera"],
            fps=float(u["fps"]),
            num_frames=n,
            arm_type=arm_type,
            primary_arm=primary,
            outcome=outcome,
            rating=u.get("rating"),
            meta_json=json.dumps(meta, sort_keys=True, separators=(",", ":")),
        )

    return {name: T[name].frame(_KEYS[name]) for name in TABLE_SCHEMAS}


def compute_labels_isolated(
    source: str, ir: dict[str, pl.DataFrame], cfg: Settings
) -> tuple[dict[str, pl.DataFrame], list[dict]]:
    """compute_labels, where a unit whose signals make a rule raise becomes that unit's quarantine row (stage
    `labels`) instead of failing the whole source. The source is labelled at once; only when that raises is each unit
    labelled alone to find the culprits, then the rest labelled together (the common path costs nothing extra)."""
    try:
        return compute_labels(source, ir, cfg), []
    except Exception:  # noqa: BLE001 - find the unit(s) below; a failure no single unit explains re-raises there
        pass
    ir = dict(ir.items())  # a lazy mapping (stages.run_labels) is read once here, not once per unit below
    by_unit = {
        name: (df.partition_by("unit_id", as_dict=True) if df is not None and "unit_id" in df.columns else {})
        for name, df in ir.items()
    }
    bad: list[dict] = []
    for uid in sorted(ir["units"]["unit_id"].to_list()):
        one = {name: (by_unit[name].get((uid,), df.clear()) if by_unit[name] else df) for name, df in ir.items()}
        try:
            compute_labels(source, one, cfg)
        except Exception as exc:  # noqa: BLE001 - this unit's row, named, and the rest goes on
            bad.append(
                {
                    "source": source,
                    "unit_id": uid,
                    "stage": "labels",
                    "file": None,
                    "units": None,
                    "reason": f"label rules failed on this unit: {type(exc).__name__}: {exc}",
                }
            )
    drop = [b["unit_id"] for b in bad]
    rest = {
        name: (df.filter(~pl.col("unit_id").is_in(drop)) if df is not None and "unit_id" in df.columns else df)
        for name, df in ir.items()
    }
    return compute_labels(source, rest, cfg), bad
