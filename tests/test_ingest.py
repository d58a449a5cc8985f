"""Ingest quarantines what it cannot use, names the unit, stage and reason, and keeps going."""

from __future__ import annotations

import sys
import types

import pytest

from factories import make_unit
import upstream_adapters
from pipeline.ingest.run import ingest_source, summary_text
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
    assert ("*", "gm100: root 'x' does not exist") in [
        (r["unit_id"], r["reason"]) for r in res.quarantine.iter_rows(named=True)
    ]


def _args(**kw):
    import argparse

    return argparse.Namespace(**{"option": None, "progress": None, **kw})


def test_ingest_command_exit_codes_and_options(demo_samples, tmp_path, capsys):
    from pipeline.ingest.run import command

    root = demo_samples["reassemble"]
    assert command(_args(source="reassemble", root=str(root), out=str(tmp_path / "a"))) == 0
    assert "units read" in capsys.readouterr().out
    # an adapter option from the command line overrides the configured one (only_split: test_split1)
    assert (
        command(
            _args(
                source="reassemble",
                root=str(root),
                out=str(tmp_path / "b"),
                option=["only_split=train_split1", "max_signal_gap_s=0.5"],
            )
        )
        == 0
    )
    import polars as pl

    a = pl.read_parquet(tmp_path / "a" / "units.parquet")["official_split"].unique().to_list()
    b = pl.read_parquet(tmp_path / "b" / "units.parquet")["official_split"].unique().to_list()
    assert a == ["test_split1"] and b == ["train_split1"]
    # an unusable source exits non-zero and says why
    assert command(_args(source="reassemble", root=str(tmp_path / "nowhere"), out=str(tmp_path / "c"))) == 1
    err = capsys.readouterr().err
    assert f"no usable source at {tmp_path / 'nowhere'}: " in err and "Expected there: data/" in err
    # a misspelt option or a bad value is an argument error naming it
    assert command(_args(source="reassemble", root=str(root), out=str(tmp_path / "d"), option=["camra=hand"])) == 2
    err = capsys.readouterr().err  # the typo, and the options there are
    assert "unknown adapter option(s) camra; valid options: " in err and "only_split" in err
    assert (
        command(_args(source="aist", root=str(root), out=str(tmp_path / "e"), option=["jpeg_channel_order=grb"])) == 2
    )
    assert command(_args(source="nope", root=str(root), out=str(tmp_path / "f"))) == 2


def test_ingest_help_lists_every_source_and_option():
    from pipeline.source_help import options_help
    from upstream_adapters import ADAPTERS, get_adapter

    text = options_help()
    for slug in ADAPTERS:
        assert f"  {slug} (" in text
        for key in get_adapter(slug).options:
            assert f"{key}: " in text


def test_content_hash_finds_the_same_recording_under_another_id(tmp_path):
    """A scene copied under a new id hashes equal (the hash holds no id or path) and is noted; others differ."""
    import shutil

    from upstream_adapters.samples import rh20t as S

    specs = [S.SceneSpec(1, 1, 1, rating=5, n_frames=30), S.SceneSpec(1, 2, 2, rating=6, n_frames=30)]
    base = S.write_root(tmp_path, specs, seed=3, size=(64, 36))
    copy = "task_0001_user_0009_scene_0001_cfg_0002"
    shutil.copytree(base / specs[0].name, base / copy)
    res = ingest_source("rh20t", tmp_path, {})
    h = dict(zip(res.units["unit_id"], res.units["content_hash"]))
    assert h[copy] == h[specs[0].name] is not None and h[specs[1].name] not in (None, h[copy])
    notes = res.notes.filter(res.notes["note"].str.contains("content_hash"))
    assert notes["unit_id"].to_list() == [copy] and specs[0].name in notes["note"][0]


def test_demo_corpora_hold_no_duplicate_content(demo_samples):
    """The demo split must not change by the duplicate merge: no two demo units share content."""
    for slug, root in demo_samples.items():
        units = ingest_source(slug, root, {}).units
        hashes = units["content_hash"].drop_nulls()
        assert hashes.len() == hashes.n_unique(), slug
        assert hashes.len() >= units.height - 1, f"{slug}: units without a content hash"
