"""The episode IR: the four tables every stage after ingest shares, with their explicit Arrow schemas.

Every adapter hands one unit over as a `UnitIR`; `validate_unit` checks it against these schemas and a few
invariants (ids consistent, frame indices contiguous from 0, clocks monotone). A unit that fails is quarantined
by the ingest stage with the reason returned here; nothing downstream ever sees it.

Conventions:
- `source` is always the slug (`gm100`, `rh20t`, `reassemble`, `aist`).
- Clocks are normalised to `frame_index` (0-based, position in the camera's decoded stream) plus `t_sec`
  (seconds from the unit's first frame on the primary camera). The native clock value is kept in `native_ts`.
- Signals are in long form, one row per (unit, arm, frame of the primary camera): single-arm sources use
  arm `single`, bimanual sources `left` and `right`. A channel the source lacks is null, never invented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from . import ADAPTERS  # noqa: E402

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

TABLES = {"units": UNITS_SCHEMA, "frames": FRAMES_SCHEMA, "signals": SIGNALS_SCHEMA, "segments": SEGMENTS_SCHEMA}


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


@dataclass
class UnitIR:
    """One isolation unit as an adapter hands it over."""

    unit: dict  # one row of UNITS_SCHEMA
    frames: pa.Table
    signals: pa.Table
    segments: pa.Table = field(default_factory=lambda: empty(SEGMENTS_SCHEMA))
    notes: list[str] = field(default_factory=list)  # assumptions or repairs made while reading (kept, not fatal)


class UnitError(Exception):
    """A unit that cannot be read. `file` is relative to the source root."""

    def __init__(self, reason: str, file: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.file = file


class UnitAbsent(UnitError):
    """A unit whose media was not downloaded (a partial download): skipped and counted as absent, not quarantined.
    A file that is there but truncated or undecodable is a plain UnitError."""


class SourceError(Exception):
    """The whole source root is unusable (missing, empty, wrong layout)."""


def to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema) if rows else empty(schema)


def validate_unit(ir: UnitIR) -> str | None:
    """Return None if `ir` satisfies the IR contract, else a one-line reason."""
    try:
        units = pa.Table.from_pylist([ir.unit], schema=UNITS_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as exc:
        return f"units row violates schema: {exc}"
    missing = [f.name for f in UNITS_SCHEMA if f.name not in ir.unit or (not f.nullable and ir.unit[f.name] is None)]
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
    for name, table in (("frames", ir.frames), ("signals", ir.signals), ("segments", ir.segments)):
        foreign = (set(table.column("unit_id").to_pylist()) - {u["unit_id"]}) | (
            set(table.column("source").to_pylist()) - {u["source"]}
        )
        if foreign:
            return f"{name} rows belong to another unit or source: {sorted(foreign)[:3]}"
    prim = [r for r in ir.frames.to_pylist() if r["camera"] == u["camera"]]
    idx = [r["frame_index"] for r in prim]
    if idx != list(range(u["num_frames"])):
        return f"primary-camera frame indices are not 0..{u['num_frames'] - 1} in order"
    t = [r["t_sec"] for r in prim]
    if any(b < a for a, b in zip(t, t[1:])):
        return "primary-camera clock is not monotone"
    arms = set(ir.signals.column("arm").to_pylist())
    if arms - set(ARMS):
        return f"unknown arm names {sorted(arms - set(ARMS))}"
    sig_idx = ir.signals.column("frame_index").to_pylist()
    if sig_idx and (min(sig_idx) < 0 or max(sig_idx) >= u["num_frames"]):
        return "signals reference frames outside the primary camera"
    for s in ir.segments.to_pylist():
        if s["level"] not in SEGMENT_LEVELS:
            return f"unknown segment level {s['level']!r}"
        if not (0 <= s["start_frame"] <= s["end_frame"] < u["num_frames"]):
            return f"segment {s['level']}/{s['seg_index']} frames {s['start_frame']}..{s['end_frame']} out of range"
    return None
