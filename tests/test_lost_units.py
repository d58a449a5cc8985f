"""Every lost unit counted: a container whose units cannot be listed (a zero-length, unreadable or cut-short AIST
zip, a folder where the zip should be, an unreadable GM-100 task folder) counts the units it held, as many as the
source's readable containers hold (median), so the per-source loss limit (build.max_quarantine_share) sees them.
Before, each was one row counted as one unit: 28.6-33 % of a source lost was published under a 25 % limit."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from factories import AIST_EPISODES as EPISODES
from factories import AIST_GOOD as GOOD
from factories import ZIP_DAMAGE, aist_root_with_bad_zip, aist_task_zip
from pipeline.settings.config import load_settings
from pipeline.ingest.run import ingest_source, units_lost, write_ir
from pipeline.stages import quarantine_shares
from upstream_adapters.storage.zipwindow import local_members

LIMIT = load_settings().build.max_quarantine_share


def _share(tmp_path, res, slug):
    write_ir(res, tmp_path / "work" / "ir" / slug)
    return quarantine_shares(
        load_settings().with_values({"build.work_dir": str(tmp_path / "work"), "build.sources": [slug]}), slug
    )[slug]


@pytest.mark.parametrize("how", ZIP_DAMAGE)
def test_a_lost_aist_zip_counts_the_episodes_it_held(tmp_path, monkeypatch, how):
    root, bad = aist_root_with_bad_zip(tmp_path, how, monkeypatch.setattr)
    named = 0
    if how == "half_cut":
        names, complete = local_members(bad)
        named = len(names)
        assert 0 < named < EPISODES and not complete
    res = ingest_source("aist", root, {})
    assert res.units.height == len(GOOD) * EPISODES  # the good tasks are read whole
    rows = res.quarantine.to_dicts()
    assert units_lost(res.quarantine) == EPISODES, rows
    assert all(r["file"] == "insert_rod_board.zip" for r in rows)
    sentinel = next(r for r in rows if r["unit_id"] == "task_016_unreadable")
    assert (
        f"counted as {EPISODES - named} lost episodes: the median of this source's readable tasks" in sentinel["reason"]
    )
    assert _share(tmp_path, res, "aist") == round(EPISODES / (3 * EPISODES), 4) > LIMIT


def test_a_zip_that_lost_only_its_central_directory_counts_what_it_names(tmp_path):
    """A zip cut inside its central directory still names every member in its local headers: no estimate."""
    root, bad = aist_root_with_bad_zip(tmp_path, None, None)
    aist_task_zip(bad, "insert_rod_board", "task_016", episodes=2)
    with zipfile.ZipFile(bad) as zf:
        start = zf.infolist()[-1].header_offset + 30 + len(zf.infolist()[-1].filename) + zf.infolist()[-1].compress_size
    bad.write_bytes(bad.read_bytes()[: start + 10])
    assert local_members(bad) == ([f"insert_rod_board/episode_{i}.hdf5" for i in range(2)], True)
    res = ingest_source("aist", root, {})
    assert sorted(res.quarantine["unit_id"].to_list()) == ["task_016_episode_0", "task_016_episode_1"]
    assert units_lost(res.quarantine) == 2


def test_an_unreadable_gm100_task_folder_counts_the_episodes_it_held(tmp_path, monkeypatch):
    from upstream_adapters.samples import gm100 as G

    root = tmp_path / "gm100"
    G.write(root, scale="tiny", seed=0)
    opts = load_settings().sources["gm100"].adapter.options()
    before = ingest_source("gm100", root, opts)
    lost_task = sorted(before.units["task_id"].unique().to_list())[-1]
    for name in ("stat", "listdir"):  # the folder's listing and its meta/ (info.json, episodes.jsonl) refused
        real = getattr(os, name)
        bad = root / lost_task / ("meta" if name == "stat" else "")

        def deny(path=".", *a, _real=real, _bad=bad, **kw):
            if isinstance(path, (str, os.PathLike)) and (Path(path) == _bad or _bad in Path(path).parents):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return _real(path, *a, **kw)

        monkeypatch.setattr(os, name, deny)
    res = ingest_source("gm100", root, opts)
    row = res.quarantine.filter(res.quarantine["unit_id"] == f"{lost_task}__unlisted").to_dicts()[0]
    assert row["reason"] == "task folder cannot be read: PermissionError"
    others = sorted(n for t, n in before.units.group_by("task_id").len().iter_rows() if t != lost_task)
    assert row["units"] == others[(len(others) - 1) // 2] > 1 and units_lost(res.quarantine) == row["units"]
