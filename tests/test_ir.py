"""The episode IR contract: validate_unit accepts a well-formed unit and names what is wrong with a bad one."""

import pyarrow as pa
import pytest

from factories import make_unit
from upstream_adapters.ir import FRAMES_SCHEMA, SEGMENTS_SCHEMA, SIGNALS_SCHEMA, to_table, validate_unit


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


LIMITS = {
    "fps": [1.0, 1000.0],
    "rating": [-1, 9],
    "duration_max_s": 86400.0,
    "position_abs_max": 1000.0,
    "speed_abs_max": 1000.0,
    "gripper_abs_max": 1e5,
    "force_abs_max": 1e5,
}


def _with_signal(ir, col, value, row=2):
    sig = ir.signals.to_pylist()
    sig[row][col] = value
    ir.signals = to_table(sig, SIGNALS_SCHEMA)
    return ir


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda ir: ir.unit.update(fps=float("inf")), "units.fps is not finite"),
        (lambda ir: ir.unit.update(fps=1e308), "units.fps 1e+308 outside [1, 1000]"),
        (lambda ir: ir.unit.update(fps=1e12), "units.fps 1e+12 outside"),
        (lambda ir: ir.unit.update(rating=int(1e300)), "units.rating 1e+300 does not fit a 64-bit integer"),
        (lambda ir: ir.unit.update(rating=42), "units.rating 42 outside [-1, 9]"),
        (
            lambda ir: _with_signal(ir, "pos_x", float("inf")),
            "signals.pos_x has non-finite values (1, first at frame_index 2)",
        ),
        (lambda ir: _with_signal(ir, "pos_y", float("-inf")), "signals.pos_y has non-finite"),
        (lambda ir: _with_signal(ir, "pos_x", float("nan")), "signals.pos_x has non-finite"),
        (lambda ir: _with_signal(ir, "pos_x", 1e30), "signals.pos_x magnitude 1e+30 exceeds 1000"),
        (lambda ir: _with_signal(ir, "force", -2e5), "signals.force magnitude 2e+05 exceeds"),
        (lambda ir: _with_signal(ir, "speed", 5e3), "signals.speed magnitude"),
        (lambda ir: _with_signal(ir, "gripper_effort", 1e9), "signals.gripper_effort magnitude"),
    ],
)
def test_garbage_numbers_are_named(mutate, expected):
    ir = make_unit()
    mutate(ir)
    assert expected in validate_unit(ir, LIMITS)


def test_clock_must_strictly_increase_and_fit_the_duration_limit():
    def with_t(values):
        ir = make_unit(n=len(values))
        ir.frames = ir.frames.set_column(4, FRAMES_SCHEMA.field("t_sec"), pa.array(values, pa.float64()))
        return ir

    assert validate_unit(with_t([0.0] * 5)) == "primary-camera clock is constant (all 5 timestamps equal)"
    assert "frame 2 repeats t_sec=0.1" in validate_unit(with_t([0.0, 0.1, 0.1, 0.2, 0.3]))
    assert "frames.t_sec has non-finite values" in validate_unit(with_t([0.0, 0.1, float("inf"), 0.2, 0.3]))
    assert "spans 1e+06 s" in validate_unit(with_t([0.0, 1.0, 2.0, 3.0, 1e6]), LIMITS)
    assert validate_unit(make_unit(), LIMITS) is None  # the limits accept a sane unit


def test_configured_limits_are_the_ones_validate_uses():
    from pipeline.settings.config import load_settings

    limits = load_settings().build.ir_limits.model_dump()
    assert validate_unit(make_unit(), limits) is None
    ir = make_unit()
    ir.unit["fps"] = limits["fps"][1] * 2
    assert "build.ir_limits.fps" in validate_unit(ir, limits)
