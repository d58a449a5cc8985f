"""A unit that passes ingest but gives no candidate item is reported by the candidates stage with a reason."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from pipeline import stages
from pipeline.settings.config import load_settings
from pipeline.families.no_items import units_without_items
from pipeline.ingest.run import ingest_source, write_ir
from upstream_adapters.samples import rh20t as S

SPECS = [S.SceneSpec(1, 1, 1, rating=5, n_frames=60), S.SceneSpec(1, 2, 2, rating=6, n_frames=60)]
STUCK = SPECS[1].name
CHANNELS = ["pos_x", "pos_y", "pos_z", "speed", "gripper_effort", "gripper_width", "force"]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("rh")
    S.write_root(root, SPECS, seed=3, size=(64, 36))
    return ingest_source("rh20t", root, {})


def _only(df: pl.DataFrame, col: str, value) -> pl.DataFrame:
    return df.with_columns(pl.when(pl.col("unit_id") == STUCK).then(value).otherwise(pl.col(col)).alias(col))


def test_stage_reports_a_unit_without_items_and_why(ingested, tmp_path, monkeypatch):
    res = replace(
        ingested,
        frames=_only(ingested.frames, "t_sec", 0.0),  # a clock that never advances
        signals=_only(ingested.signals, "t_sec", 0.0),
    )
    cfg = load_settings().with_values({"build.work_dir": str(tmp_path / "work")})
    write_ir(res, tmp_path / "work" / "ir" / "rh20t")
    stages.run_labels(cfg, "rh20t")
    real = stages.merge_candidates
    # plant: the families give this unit nothing (as GM-100's window rules do for a clock that never advances)
    monkeypatch.setattr(stages, "merge_candidates", lambda *a: real(*a).filter(pl.col("unit_id") != STUCK))
    summary = stages.run_candidates(cfg, "rh20t")
    assert summary["candidates"] > 0 and summary["no_items"] == 1 and list(summary["no_items_units"]) == [STUCK]
    assert "clock is constant" in summary["no_items_units"][STUCK]
    monkeypatch.setattr(stages, "merge_candidates", real)
    assert stages.run_candidates(cfg, "rh20t")["no_items"] == 0


def test_reasons_name_what_is_missing(ingested):
    ir = {"units": ingested.units, "frames": ingested.frames, "signals": ingested.signals}
    pool = pl.DataFrame({"unit_id": [SPECS[0].name]})
    flat = {**ir, "signals": ingested.signals.with_columns([_only(ingested.signals, c, None)[c] for c in CHANNELS])}
    assert "null or constant" in units_without_items("rh20t", flat, {}, pool)["reason"][0]
    got = units_without_items("rh20t", ir, {}, pool)
    assert got["unit_id"].to_list() == [STUCK] and "no family's template matched" in got["reason"][0]
