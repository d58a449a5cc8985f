"""Ingest quarantines what it cannot use, names the unit, stage and reason, and keeps going."""

from __future__ import annotations

import sys
import types

import pytest

import upstream_adapters
from pipeline.ingest import ingest_source, summary_text
from test_ir import make_unit
from upstream_adapters.ir import SourceError, UnitError


class FakeAdapter:
    slug, name, unit_type = "gm100", "GM-100", "episode"

    def __init__(self, mode="ok"):
        self.mode = mode
        self.issues = [("broken.tar.gz", "damaged archive: crc error")]

    def discover(self, root):
        if self.mode == "no-root":
            raise SourceError("gm100: root 'x' does not exist")
        return ["good", "unreadable", "crashes", "bad-ir"]

    def read_unit(self, root, unit_id):
        if unit_id == "unreadable":
            raise UnitError("camera_top video is truncated", file="task_00001/videos/e.mp4")
        if unit_id == "crashes":
            raise ZeroDivisionError("adapter bug")
        ir = make_unit(unit_id="task_00001__episode_000000" if unit_id == "good" else unit_id)
        if unit_id == "bad-ir":
            ir.unit["fps"] = -1.0
        return ir


@pytest.fixture
def fake(monkeypatch):
    mod = types.ModuleType("fake_adapter_mod")
    mod.FakeAdapter = FakeAdapter
    monkeypatch.setitem(sys.modules, "fake_adapter_mod", mod)
    monkeypatch.setitem(upstream_adapters.ADAPTERS, "gm100", "fake_adapter_mod:FakeAdapter")


def test_bad_units_are_quarantined_and_the_rest_goes_on(fake, tmp_path):
    res = ingest_source("gm100", tmp_path, {})
    assert res.units["unit_id"].to_list() == ["task_00001__episode_000000"]
    q = {r["unit_id"]: r for r in res.quarantine.iter_rows(named=True)}
    assert q["unreadable"]["reason"] == "camera_top video is truncated"
    assert q["unreadable"]["file"] == "task_00001/videos/e.mp4"
    assert "ZeroDivisionError" in q["crashes"]["reason"]
    assert "IR schema" in q["bad-ir"]["reason"] and "no frames" in q["bad-ir"]["reason"]
    assert q["*"]["reason"] == "damaged archive: crc error" and q["*"]["file"] == "broken.tar.gz"
    assert set(res.quarantine["stage"]) == {"ingest"}
    text = summary_text("gm100", res)
    assert "1 units read" in text and "camera_top video is truncated" in text


def test_unusable_root_is_one_quarantine_row(fake, tmp_path):
    res = ingest_source("gm100", tmp_path, {"mode": "no-root"})
    assert res.units.height == 0
    assert ("*", "gm100: root 'x' does not exist") in [(r["unit_id"], r["reason"]) for r in res.quarantine.iter_rows(named=True)]
