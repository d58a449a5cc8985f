"""Archives: bombs are refused per unit with bounded memory and no temp spill (archive_limits), a container that
fails counts every unit it held, folders named like archives are read, limits are typed settings."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from bombs import PEAK_LIMIT_KB as RSS_LIMIT_KB
from bombs import REPO, probe, tar_gz_bomb, zip_bomb
from pipeline.settings.config import load_settings
from pipeline.ingest.run import ingest_source, summary_text, units_lost, write_ir
from pipeline.settings.errors import ConfigError
from pipeline.stages import quarantine_shares
from upstream_adapters.aist.adapter import AistAdapter
from upstream_adapters.ir import UnitError, validate_unit
from upstream_adapters.rh20t.adapter import Rh20tAdapter
from upstream_adapters.samples import aist as A
from upstream_adapters.samples import rh20t as S

SIZE = (64, 36)
GOOD, BOMB = S.SceneSpec(1, 1, 1, rating=5, n_frames=30), S.SceneSpec(1, 2, 2, rating=6, n_frames=30)
TASK = {t[0]: t for t in A.TASKS}


def _probe(slug: str, root: Path, bad: str, good: str) -> dict:
    """bombs.probe without the bomb's frames; `file` is the bad unit's file (peak RSS held under 1 GiB there)."""
    got = probe(slug, root, bad, good, frames=False)
    return {**got, "file": got.get("bad_file")}


def _scene(spec) -> dict[str, bytes]:
    return {f"{S.CFG_DIR}/{spec.name}/{k}": v for k, v in S.scene_files(spec, 3, SIZE).items()}


def ep_bytes(tid: str, ep: int, n: int = 40) -> bytes:
    _, name, taxonomy, prompt = TASK[tid]
    return A.episode_bytes(tid, name, taxonomy, prompt, ep, n, (64, 48), seed=0)


# ------------------------------------------------------------------------------------------------ bombs


def test_tar_gz_bomb_member_is_its_scenes_row_with_bounded_memory(tmp_path):
    bomb_rel = f"{S.CFG_DIR}/{BOMB.name}/cam_{S.PRIMARY}/color.mp4"
    before = {**_scene(GOOD), **{k: v for k, v in _scene(BOMB).items() if k != bomb_rel}}
    size = tar_gz_bomb(tmp_path / "RH20T_cfg2.tar.gz", before, bomb_rel, gib=3)
    assert (tmp_path / "RH20T_cfg2.tar.gz").stat().st_size < 8 << 20 and size == 3 << 30
    got = _probe("rh20t", tmp_path, BOMB.name, GOOD.name)
    assert got["ids"] == sorted([GOOD.name, BOMB.name])
    assert "color.mp4" in got["bad"] and ("max_compression_ratio" in got["bad"] or "max_member_bytes" in got["bad"])
    assert got["file"] == f"RH20T_cfg2.tar.gz:{bomb_rel}"
    assert got["good_frames"] == 30
    assert got["maxrss_kb"] < RSS_LIMIT_KB, f"peak RSS {got['maxrss_kb']} kB"


def test_zip_bomb_member_is_its_episodes_row_without_temp_spill(tmp_path):
    A.write_manifest(tmp_path)
    zip_bomb(
        tmp_path / "insert_usb_cable.zip",
        {"insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0)},
        "insert_usb_cable/episode_1.hdf5",
        gib=3,
    )
    assert (tmp_path / "insert_usb_cable.zip").stat().st_size < 8 << 20
    got = _probe("aist", tmp_path, "task_004_episode_1", "task_004_episode_0")
    assert got["ids"] == ["task_004_episode_0", "task_004_episode_1"]
    assert "max_compression_ratio" in got["bad"] and got["file"].endswith("episode_1.hdf5")
    assert got["good_frames"] == 40
    assert got["temp_files"] == 0
    assert got["maxrss_kb"] < RSS_LIMIT_KB, f"peak RSS {got['maxrss_kb']} kB"


def test_zip_member_that_lies_about_its_size_inflates_no_further_than_declared(tmp_path):
    """A member whose headers declare 4 MiB (within every limit) but whose data inflates to 1.5 GiB: the adapter
    inflates at most the declared size, in memory, and the CRC then fails the episode; memory stays bounded."""
    A.write_manifest(tmp_path)
    zip_bomb(
        tmp_path / "insert_usb_cable.zip",
        {"insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0)},
        "insert_usb_cable/episode_1.hdf5",
        gib=1.5,
        declared=4 << 20,
    )
    got = _probe("aist", tmp_path, "task_004_episode_1", "task_004_episode_0")
    assert "cannot be inflated" in got["bad"] and got["file"].endswith("episode_1.hdf5")
    assert got["good_frames"] == 40
    assert got["maxrss_kb"] < RSS_LIMIT_KB, f"peak RSS {got['maxrss_kb']} kB"


def test_members_past_max_member_bytes_are_refused_and_the_rest_reads(tmp_path):
    limits = {"max_member_bytes": 4000}
    A.write_task_zip(
        tmp_path / "aist" / "insert_usb_cable.zip", {"insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0)}
    )
    with pytest.raises(UnitError, match="max_member_bytes") as e:
        AistAdapter(archive_limits=limits).read_unit(tmp_path / "aist", "task_004_episode_0")
    assert e.value.file == "insert_usb_cable.zip/insert_usb_cable/episode_0.hdf5"
    assert validate_unit(AistAdapter().read_unit(tmp_path / "aist", "task_004_episode_0")) is None
    for archive in (True, False):  # tar member, and the same bound on the files a folder scene reads whole
        root = tmp_path / f"rh{archive}"
        S.write_root(root, [GOOD], seed=3, size=SIZE, archive=archive)
        with pytest.raises(UnitError, match="max_member_bytes"):
            Rh20tAdapter(archive_limits={"max_member_bytes": 200}).read_unit(root, GOOD.name)
        assert validate_unit(Rh20tAdapter().read_unit(root, GOOD.name)) is None


def test_archive_past_max_archive_bytes_is_not_read_further(tmp_path):
    S.write_root(tmp_path, [GOOD, BOMB], seed=3, size=SIZE, archive=True)
    a = Rh20tAdapter(archive_limits={"max_archive_bytes": 60_000})
    with pytest.raises(Exception, match="max_archive_bytes"):
        a.discover(tmp_path)  # nothing readable before the bound: the source is unusable, saying why
    other = S.SceneSpec(3, 4, 2, cfg=3, rating=6, n_frames=30)
    S.write_root(tmp_path, [other], seed=6, size=SIZE, cfg_dir="RH20T_cfg3")
    a = Rh20tAdapter(cfgs=["cfg2", "cfg3"], archive_limits={"max_archive_bytes": 60_000})
    a.discover(tmp_path)
    assert any("max_archive_bytes" in r for _, r in a.issues)
    assert validate_unit(a.read_unit(tmp_path, other.name)) is None


def test_archive_limits_are_typed_settings(tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    path = tmp_path / "configs" / "sources.yaml"
    data = yaml.safe_load(path.read_text())
    assert load_settings(tmp_path / "configs").sources["aist"].adapter.archive_limits.max_compression_ratio
    for bad in ({"max_member_bytes": -1}, {"max_compression_ratio": 1}, {"max_total": 5}):
        data["sources"]["aist"]["adapter"]["archive_limits"] = bad
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match="archive_limits"):
            load_settings(tmp_path / "configs")


# ------------------------------------------------------------------------------------------------ containers


def _aist_root(tmp_path: Path) -> Path:
    root = tmp_path / "aist"
    root.mkdir(parents=True)
    A.write_manifest(root)
    A.write_task_zip(
        root / "insert_usb_cable.zip", {f"insert_usb_cable/episode_{i}.hdf5": ep_bytes("task_004", i) for i in range(2)}
    )
    return root


class _Stream(io.RawIOBase):
    """A non-seekable sink: zipfile then writes data descriptors after each member, as streaming zip servers do."""

    def __init__(self):
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


@pytest.mark.parametrize("kind", ["seekable", "streamed_stored", "streamed_deflated"])
def test_unreadable_zip_counts_each_episode_it_held(tmp_path, kind):
    root = _aist_root(tmp_path)
    bad = root / "insert_rod_board.zip"
    members = {f"insert_rod_board/episode_{i}.hdf5": ep_bytes("task_016", i) for i in range(3)}
    if kind == "seekable":
        A.write_task_zip(bad, members)
    else:
        sink, method = _Stream(), zipfile.ZIP_STORED if kind == "streamed_stored" else zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(sink, "w") as zf:
            for name, data in members.items():
                info = zipfile.ZipInfo(name)
                info.compress_type = method
                zf.writestr(info, data)
        bad.write_bytes(bytes(sink.data))
    bad.write_bytes(bad.read_bytes()[:-200])  # a download cut short: the central directory is gone
    res = ingest_source("aist", root, {})
    q = res.quarantine.filter(pl.col("unit_id").str.starts_with("task_016"))
    assert q["unit_id"].to_list() == [f"task_016_episode_{i}" for i in range(3)]
    assert all("not a readable zip" in r for r in q["reason"]) and set(q["file"]) == {"insert_rod_board.zip"}
    assert res.units.height == 2


def test_unmapped_task_row_counts_its_episodes_in_the_quarantine_share(tmp_path):
    root = _aist_root(tmp_path)
    A.write_task_zip(
        root / "sort_unknown_things.zip",
        {f"sort_unknown_things/episode_{i}.hdf5": ep_bytes("task_016", i) for i in range(3)},
    )
    res = ingest_source("aist", root, {})
    row = res.quarantine.filter(pl.col("unit_id") == "unmapped_sort_unknown_things").row(0, named=True)
    assert row["units"] == 3 and "3 episodes not read" in row["reason"]
    assert units_lost(res.quarantine) == 3
    assert "2 units read, 3 quarantined" in summary_text("aist", res)
    from pipeline.settings.config import load_settings

    cfg = load_settings().with_values({"build.work_dir": str(tmp_path / "work"), "build.sources": ["aist"]})
    write_ir(res, tmp_path / "work" / "ir" / "aist")
    assert quarantine_shares(cfg, "aist") == {"aist": round(3 / 5, 4)}  # 3 lost of 2 read + 3


@pytest.mark.parametrize("layout", ["flat", "nested"])
def test_folder_named_like_a_zip_is_read_as_the_extracted_task(tmp_path, layout):
    root = _aist_root(tmp_path)
    folder = root / "insert_rod_board.zip"
    for i in range(3):
        p = folder / ("insert_rod_board" if layout == "nested" else "") / f"episode_{i}.hdf5"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(ep_bytes("task_016", i))
    a = AistAdapter()
    assert [u for u in a.discover(root) if u.startswith("task_016")] == [f"task_016_episode_{i}" for i in range(3)]
    assert validate_unit(a.read_unit(root, "task_016_episode_2")) is None


def test_folder_of_unrecognised_hdf5_files_is_a_row_not_silence(tmp_path):
    root = _aist_root(tmp_path)
    (root / "insert_rod_board").mkdir()
    for i in range(3):
        (root / "insert_rod_board" / f"take {i}.hdf5").write_bytes(ep_bytes("task_016", i))
    res = ingest_source("aist", root, {})
    row = res.quarantine.filter(pl.col("unit_id") == "task_016_unreadable").row(0, named=True)
    assert "none named episode_N.hdf5" in row["reason"] and row["file"] == "insert_rod_board"


def test_rh20t_folder_named_like_the_archive_is_read(tmp_path):
    S.write_root(tmp_path / "RH20T_cfg2.tar.gz", [GOOD, BOMB], seed=3, size=SIZE)  # .../RH20T_cfg2/<scenes>
    a = Rh20tAdapter()
    assert a.discover(tmp_path) == sorted([GOOD.name, BOMB.name])
    assert validate_unit(a.read_unit(tmp_path, BOMB.name)) is None
    assert a.read_frames(tmp_path, GOOD.name, S.PRIMARY, [3])[3].shape[2] == 3
