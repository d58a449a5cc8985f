"""The episode IR contract: validate_unit accepts a well-formed unit and names what is wrong with a bad one."""

import pyarrow as pa
import pytest

from upstream_adapters.ir import (
    FRAMES_SCHEMA,
    SEGMENTS_SCHEMA,
    SIGNALS_SCHEMA,
    UnitIR,
    to_table,
    validate_unit,
)


def make_unit(n=5, **overrides):
    unit = {
        "source": "gm100", "unit_id": "task_00001__episode_000000", "unit_type": "episode", "task_id": "task_00001",
        "operator_id": None, "scene_id": None, "config_id": None, "taxonomy": None, "official_split": None,
        "cameras": ["camera_top", "camera_wrist_left"], "camera": "camera_top", "fps": 30.0, "num_frames": n,
        "arm_layout": "bimanual", "licence": "unknown", "rating": None, "language": None,
    }
    unit.update(overrides)
    frames = to_table([{"source": "gm100", "unit_id": unit["unit_id"], "camera": "camera_top", "frame_index": i,
                        "t_sec": i / 30, "native_ts": i / 30} for i in range(n)], FRAMES_SCHEMA)
    signals = to_table([{"source": "gm100", "unit_id": unit["unit_id"], "arm": arm, "frame_index": i, "t_sec": i / 30,
                         "pos_x": 0.1 * i, "pos_y": 0.0, "pos_z": None, "speed": 0.1, "gripper_effort": 1.0,
                         "gripper_width": None, "force": None} for arm in ("left", "right") for i in range(n)],
                       SIGNALS_SCHEMA)
    segments = to_table([{"source": "gm100", "unit_id": unit["unit_id"], "level": "high", "seg_index": 0,
                          "parent_index": None, "text": "x", "start_frame": 0, "end_frame": n - 1, "start_sec": 0.0,
                          "end_sec": (n - 1) / 30, "success": True}], SEGMENTS_SCHEMA)
    return UnitIR(unit=unit, frames=frames, signals=signals, segments=segments)


def test_valid_unit_passes():
    assert validate_unit(make_unit()) is None


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"source": "nope"}, "unknown source"),
        ({"unit_type": "clip"}, "unknown unit_type"),
        ({"arm_layout": "tripod"}, "unknown arm_layout"),
        ({"camera": "cam_x"}, "not among cameras"),
        ({"fps": 0.0}, "no frames"),
        ({"num_frames": 7}, "frame indices"),
    ],
)
def test_bad_unit_rows_are_named(overrides, expected):
    assert expected in validate_unit(make_unit(**overrides))


def test_missing_required_unit_field():
    ir = make_unit()
    ir.unit["task_id"] = None
    assert "lacks required fields ['task_id']" in validate_unit(ir)


def test_table_schema_mismatch_and_foreign_rows():
    ir = make_unit()
    ir.signals = ir.signals.drop_columns(["force"])
    assert "signals table schema differs" in validate_unit(ir)
    ir = make_unit()
    ir.frames = ir.frames.set_column(1, FRAMES_SCHEMA.field("unit_id"), pa.array(["other"] * ir.frames.num_rows))
    assert "another unit" in validate_unit(ir)


def test_clock_and_ranges():
    ir = make_unit()
    t = ir.frames.column("t_sec").to_pylist()
    t[2], t[3] = t[3], t[2]
    ir.frames = ir.frames.set_column(4, FRAMES_SCHEMA.field("t_sec"), pa.array(t, pa.float64()))
    assert "not monotone" in validate_unit(ir)
    ir = make_unit()
    seg = ir.segments.to_pylist()
    seg[0]["end_frame"] = 99
    ir.segments = to_table(seg, SEGMENTS_SCHEMA)
    assert "out of range" in validate_unit(ir)
    ir = make_unit()
    sig = ir.signals.to_pylist()
    sig[0]["arm"] = "third"
    ir.signals = to_table(sig, SIGNALS_SCHEMA)
    assert "unknown arm" in validate_unit(ir)
