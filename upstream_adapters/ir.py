"""The episode IR: the four tables every stage after ingest shares, with their explicit Arrow schemas.

Every adapter hands one unit over as a `UnitIR`; `validate_unit` checks it against these schemas and a few
invariants (ids consistent, frame indices contiguous from 0, the primary clock strictly increasing, every number
finite) and, given `limits` (configs/build.yaml `build.ir_limits`), the sane ranges of fps, rating, duration and the
signal channels. A unit that fails is quarantined by the ingest stage with the reason returned here, which names the
field; nothing downstream ever sees it.

Conventions:
- `source` is always the source's slug, its key in the adapter registry (`upstream_adapters.ADAPTERS`).
- Clocks are normalised to `frame_index` (0-based, position in the camera's decoded stream) plus `t_sec`
  (seconds from the unit's first frame on the primary camera). The native clock value is kept in `native_ts`.
- Signals are in long form, one row per (unit, arm, frame of the primary camera): single-arm sources use
  arm `single`, bimanual sources `left` and `right`. A channel the source lacks is null, never invented.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import ADAPTERS

SOURCE_SLUGS = ADAPTERS.keys()  # a live view of the adapter registry (upstream_adapters.register adds to it)
UNIT_TYPES = ("episode", "recording")
ARMS = ("single", "left", "right")
ARM_LAYOUTS = ("single_arm", "single_left", "single_right", "bimanual_sync", "bimanual_sequential", "bimanual")
SEGMENT_LEVELS = ("high", "low")

UNITS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),  # the isolation unit, e.g. task_00043__episode_000007
        pa.field("unit_type", pa.string(), nullable=False),  # episode | recording
        pa.field("task_id", pa.string(), nullable=False),  # source_task_id, e.g. task_00043
        pa.field("operator_id", pa.string()),  # RH20T user; null where the source has none
        pa.field("scene_id", pa.string()),  # RH20T scene
        pa.field("config_id", pa.string()),  # RH20T cfg
        pa.field("taxonomy", pa.string()),  # AIST taxonomy
        pa.field("official_split", pa.string()),  # REASSEMBLE split-file membership (e.g. test_split1)
        pa.field("cameras", pa.list_(pa.string()), nullable=False),  # cameras present, sorted
        pa.field("camera", pa.string(), nullable=False),  # the primary camera the IR clocks/signals refer to
        pa.field("fps", pa.float64(), nullable=False),  # nominal fps of the primary camera
        pa.field("num_frames", pa.int64(), nullable=False),  # frames decodable on the primary camera
        pa.field("arm_layout", pa.string(), nullable=False),
        pa.field("licence", pa.string(), nullable=False),  # e.g. CC BY 4.0, or "unknown"
        pa.field("rating", pa.int64()),  # RH20T metadata.json rating (raw; the outcome rule lives in labels)
        pa.field("language", pa.string()),  # task text; kept out of prompts
        pa.field("content_hash", pa.string()),  # set by ingest from the clock and signals (duplicates); null = unknown
    ]
)

FRAMES_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("camera", pa.string(), nullable=False),
        pa.field("frame_index", pa.int64(), nullable=False),
        pa.field("t_sec", pa.float64(), nullable=False),  # seconds from the unit start (primary camera frame 0)
        pa.field("native_ts", pa.float64(), nullable=False),  # the source's own clock value for this frame
    ]
)

SIGNALS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("arm", pa.string(), nullable=False),  # single | left | right
        pa.field("frame_index", pa.int64(), nullable=False),  # frame of the primary camera
        pa.field("t_sec", pa.float64(), nullable=False),
        pa.field("pos_x", pa.float64()),  # end-effector (or joint proxy, per source) position channels
        pa.field("pos_y", pa.float64()),
        pa.field("pos_z", pa.float64()),
        pa.field("speed", pa.float64()),  # native velocity magnitude where the source records one
        pa.field("gripper_effort", pa.float64()),
        pa.field("gripper_width", pa.float64()),
        pa.field("force", pa.float64()),  # magnitude of the (zeroed) force vector, N
        # magnitude over all of the arm's velocity components where `speed` uses only the first three and a rule was
        # tuned on the whole vector (GM-100: ||velocity[0:6]|| per arm, the phase rule); null elsewhere
        pa.field("speed_full", pa.float64()),
    ]
)

SEGMENTS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("level", pa.string(), nullable=False),  # high | low
        pa.field("seg_index", pa.int64(), nullable=False),  # order within its level (low: within its parent)
        pa.field("parent_index", pa.int64()),  # high-level seg_index of a low-level segment
        pa.field("text", pa.string(), nullable=False),  # e.g. "Pick round peg 1." / "Grasp"
        pa.field("start_frame", pa.int64(), nullable=False),  # on the primary camera
        pa.field("end_frame", pa.int64(), nullable=False),
        pa.field("start_sec", pa.float64(), nullable=False),
        pa.field("end_sec", pa.float64(), nullable=False),
        pa.field("success", pa.bool_()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),  # "*" when the whole source failed
        pa.field("stage", pa.string(), nullable=False),  # ingest | labels | items | frames | ...
        pa.field("reason", pa.string(), nullable=False),
        pa.field("file", pa.string()),  # path relative to the source root (never absolute)
        pa.field("units", pa.int64()),  # upstream units this row stands for when more than one; null = one/unknown
    ]
)

ABSENT_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("unit_id", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("file", pa.string()),  # the missing file, relative to the source root
    ]
)

# signal channel -> the key of `build.ir_limits` bounding its magnitude
SIGNAL_LIMITS = {
    "pos_x": "position_abs_max",
    "pos_y": "position_abs_max",
    "pos_z": "position_abs_max",
    "speed": "speed_abs_max",
    "gripper_effort": "gripper_abs_max",
    "gripper_width": "gripper_abs_max",
    "force": "force_abs_max",
}
_FLOAT_COLUMNS = (
    ("frames", ("t_sec", "native_ts")),
    ("signals", ("t_sec", *SIGNAL_LIMITS)),
    ("segments", ("start_sec", "end_sec")),
)
_INT64_MAX = 2**63 - 1
INGEST_FIELDS = ("content_hash",)  # units fields the ingest stage fills, not the adapter

TABLES = {"units": UNITS_SCHEMA, "frames": FRAMES_SCHEMA, "signals": SIGNALS_SCHEMA, "segments": SEGMENTS_SCHEMA}


def empty(schema: pa.Schema) -> pa.Table:
    hit = _EMPTY.get(id(schema))
    return hit[1] if hit is not None and hit[0] is schema else schema.empty_table()


# the IR schemas' empty tables, built once (tables are immutable; every GM-100 unit has an empty segments table)
_EMPTY = {
    id(s): (s, s.empty_table())
    for s in (UNITS_SCHEMA, FRAMES_SCHEMA, SIGNALS_SCHEMA, SEGMENTS_SCHEMA, QUARANTINE_SCHEMA, ABSENT_SCHEMA)
}


@dataclass
class UnitIR:
    """One isolation unit as an adapter hands it over."""

    unit: dict  # one row of UNITS_SCHEMA
    frames: pa.Table
    signals: pa.Table
    segments: pa.Table = field(default_factory=lambda: empty(SEGMENTS_SCHEMA))
    notes: list[str] = field(default_factory=list)  # assumptions or repairs made while reading (kept, not fatal)


class UnitError(Exception):
    """A unit that cannot be read. `file` is relative to the source root. `units`: how many upstream units this
    failure stands for when the unit is a placeholder for a container whose units cannot be named one by one."""

    def __init__(self, reason: str, file: str | None = None, units: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.file = file
        self.units = units


class UnitAbsent(UnitError):
    """A unit whose media was not downloaded (a partial download): skipped and counted as absent, not quarantined.
    A file that is there but truncated or undecodable is a plain UnitError."""


class SourceError(Exception):
    """The whole source root is unusable (missing, empty, wrong layout)."""


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema) if rows else empty(schema)


def float_column(values: np.ndarray) -> pa.Array:
    """A float64 column straight from numpy, null where a value is not finite (no Python object per row)."""
    values = np.asarray(values, dtype=np.float64)
    return pa.array(values, type=pa.float64(), mask=~np.isfinite(values))


def validate_unit(ir: UnitIR, limits: Mapping | None = None) -> str | None:
    """Return None if `ir` satisfies the IR contract, else a one-line reason naming the field.

    `limits` is `build.ir_limits` (configs/build.yaml); without it only the limit-free checks run (schemas, ids,
    indices, finite numbers, a strictly increasing primary clock)."""
    for key in ("num_frames", "rating"):  # an int64 field holding e.g. int(1e300) fails here, named, not in Arrow
        value = ir.unit.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
            return f"units.{key} {float(value):.3g} does not fit a 64-bit integer"
    try:
        units = pa.Table.from_pylist([ir.unit], schema=UNITS_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError, OverflowError) as exc:
        return f"units row violates schema: {exc}"
    missing = [
        f.name
        for f in UNITS_SCHEMA
        if (f.name not in ir.unit and f.name not in INGEST_FIELDS) or (not f.nullable and ir.unit[f.name] is None)
    ]
    if missing:
        return f"units row lacks required fields {missing}"
    for name, table, schema in (
        ("frames", ir.frames, FRAMES_SCHEMA),
        ("signals", ir.signals, SIGNALS_SCHEMA),
        ("segments", ir.segments, SEGMENTS_SCHEMA),
    ):
        if not table.schema.equals(schema):
            return f"{name} table schema differs from the IR: {table.schema} != {schema}"
        for col in schema:
            if not col.nullable and table.column(col.name).null_count:
                return f"{name}.{col.name} has nulls"
    u = units.to_pylist()[0]
    if u["source"] not in SOURCE_SLUGS:
        return f"unknown source {u['source']!r}"
    if u["unit_type"] not in UNIT_TYPES:
        return f"unknown unit_type {u['unit_type']!r}"
    if u["arm_layout"] not in ARM_LAYOUTS:
        return f"unknown arm_layout {u['arm_layout']!r}"
    if u["camera"] not in u["cameras"]:
        return f"primary camera {u['camera']!r} not among cameras {u['cameras']}"
    if u["num_frames"] <= 0 or not u["fps"] > 0:
        return f"no frames (num_frames={u['num_frames']}, fps={u['fps']})"
    problem = _unit_range_problem(u, limits)
    if problem:
        return problem
    # whole-column checks: distinct values and numpy arrays, never a Python object per row
    for name, table in (("frames", ir.frames), ("signals", ir.signals), ("segments", ir.segments)):
        foreign = (set(pc.unique(table.column("unit_id")).to_pylist()) - {u["unit_id"]}) | (
            set(pc.unique(table.column("source")).to_pylist()) - {u["source"]}
        )
        if foreign:
            return f"{name} rows belong to another unit or source: {sorted(foreign)[:3]}"
    prim = primary_mask(ir.frames, u["camera"])
    idx = ir.frames.column("frame_index").to_numpy()[prim]
    if len(idx) != u["num_frames"] or not np.array_equal(idx, np.arange(len(idx))):
        return f"primary-camera frame indices are not 0..{u['num_frames'] - 1} in order"
    problem = _finite_problem(ir, limits)
    if problem:
        return problem
    t = ir.frames.column("t_sec").to_numpy()[prim]  # finite (checked above)
    if np.any(t[1:] < t[:-1]):
        return "primary-camera clock is not monotone"
    if len(t) > 1 and t[0] == t[-1]:
        return f"primary-camera clock is constant (all {len(t)} timestamps equal)"
    repeats = np.flatnonzero(t[1:] == t[:-1])
    if len(repeats):
        repeat = int(repeats[0]) + 1
        return f"primary-camera clock is not strictly increasing (frame {repeat} repeats t_sec={float(t[repeat]):g})"
    if limits is not None and len(t) > 1 and t[-1] - t[0] > limits["duration_max_s"]:
        return (
            f"primary-camera clock spans {float(t[-1] - t[0]):.4g} s, more than {limits['duration_max_s']:g} s "
            "(build.ir_limits.duration_max_s)"
        )
    arms = set(pc.unique(ir.signals.column("arm")).to_pylist())
    if arms - set(ARMS):
        return f"unknown arm names {sorted(arms - set(ARMS))}"
    if ir.signals.num_rows:
        span = pc.min_max(ir.signals.column("frame_index"))
        if span["min"].as_py() < 0 or span["max"].as_py() >= u["num_frames"]:
            return "signals reference frames outside the primary camera"
    for s in ir.segments.to_pylist():
        if s["level"] not in SEGMENT_LEVELS:
            return f"unknown segment level {s['level']!r}"
        if not (0 <= s["start_frame"] <= s["end_frame"] < u["num_frames"]):
            return f"segment {s['level']}/{s['seg_index']} frames {s['start_frame']}..{s['end_frame']} out of range"
    return None


def primary_mask(frames: pa.Table, camera: str) -> np.ndarray:
    """Which rows of a frames table are the primary camera's, as a numpy mask (cheaper than filtering the table)."""
    return pc.equal(frames.column("camera"), camera).to_numpy(zero_copy_only=False)


def _unit_range_problem(u: dict, limits: Mapping | None) -> str | None:
    """fps and rating of the units row: finite and within `build.ir_limits`."""
    if not math.isfinite(u["fps"]):
        return f"units.fps is not finite ({u['fps']})"
    if limits is None:
        return None
    lo, hi = limits["fps"]
    if not lo <= u["fps"] <= hi:
        return f"units.fps {u['fps']:.4g} outside [{lo:g}, {hi:g}] (build.ir_limits.fps)"
    if u["rating"] is not None:
        lo, hi = limits["rating"]
        if not lo <= u["rating"] <= hi:
            return f"units.rating {u['rating']:.4g} outside [{lo}, {hi}] (build.ir_limits.rating)"
    return None


def _finite_problem(ir: UnitIR, limits: Mapping | None) -> str | None:
    """Every float of the frames, signals and segments tables finite (null is allowed where the schema allows it);
    signal magnitudes within `build.ir_limits`. The reason names the table, the column and the first bad frame."""
    tables = {"frames": ir.frames, "signals": ir.signals, "segments": ir.segments}
    for name, cols in _FLOAT_COLUMNS:
        table = tables[name]
        if not table.num_rows:
            continue
        for col in cols:
            arr = table.column(col)
            key = SIGNAL_LIMITS.get(col) if name == "signals" else None
            bound = limits[key] if key is not None and limits is not None else None
            if arr.null_count == len(arr):  # a channel the source lacks: nothing to check
                continue
            if not arr.null_count and _finite_within(arr.to_numpy(), bound):
                continue  # the common case in one numpy pass; a failing column is named by the checks below
            bad = pc.invert(pc.is_finite(arr))
            if pc.any(bad).as_py():
                where = _first_row(table, bad)
                return f"{name}.{col} has non-finite values ({pc.sum(bad).as_py()}, first {where})"
            if bound is None:
                continue
            too_big = pc.greater(pc.abs(arr), bound)
            if pc.any(too_big).as_py():
                return (
                    f"{name}.{col} magnitude {pc.max(pc.abs(arr)).as_py():.4g} exceeds {bound:g} "
                    f"(build.ir_limits.{key}; first {_first_row(table, too_big)})"
                )
    return None


def _finite_within(values: np.ndarray, bound) -> bool:
    """Every value finite and, given a bound, |value| <= bound."""
    finite = bool(np.isfinite(values).all())
    return finite if bound is None else finite and bool((np.abs(values) <= bound).all())


def _first_row(table: pa.Table, mask) -> str:
    i = pc.index(pc.fill_null(mask, False), True).as_py()
    label = "frame_index" if "frame_index" in table.column_names else "seg_index"
    return f"at {label} {table.column(label)[i].as_py()}"
