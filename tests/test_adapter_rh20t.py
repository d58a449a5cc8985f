"""RH20T adapter + sample generator: layout, IR contract, clocks, signals, frames, archives and every odd case."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from upstream_adapters import get_adapter
from upstream_adapters.media import video
from upstream_adapters.ir import SourceError, UnitError, validate_unit
from upstream_adapters.rh20t.adapter import Rh20tAdapter, _Archive, licence_for_scene, load_npy
from upstream_adapters.samples import rh20t as S
from upstream_adapters.samples.common import decode_frame_index

SIZE = (64, 36)
N = 40

GOOD = [
    S.SceneSpec(1, 1, 1, rating=5, n_frames=N),
    S.SceneSpec(1, 3, 6, rating=1, n_frames=N + 4, transformed_drop_last=True),
    S.SceneSpec(8, 2, 12, rating=7, n_frames=N),  # scene id outside 1-10: licence unknown
    S.SceneSpec(59, 7, 6, rating=-1, n_frames=N),
]
NO_GRIPPER = S.SceneSpec(59, 10, 8, rating=4, n_frames=N, omit=("transformed/gripper.npy",))
HUMAN = S.SceneSpec(1, 1, 1, human=0, n_frames=12)
HUMAN2 = S.SceneSpec(8, 2, 12, human=2, n_frames=12)
ALL = GOOD + [NO_GRIPPER, HUMAN, HUMAN2]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rh_folder")
    S.write_root(folder, ALL, seed=3, size=SIZE, archive=False)
    tar = tmp_path_factory.mktemp("rh_tar")
    S.write_root(tar, ALL, seed=3, size=SIZE, archive=True)
    return {"folder": folder, "tar": tar}


def _scene_dir(root: Path, spec: S.SceneSpec) -> Path:
    return root / S.CFG_DIR / spec.name


def _load(root, spec, rel):
    return np.load(_scene_dir(root, spec) / rel, allow_pickle=True).item()


# ---------------------------------------------------------------------------------------------------------------
# discovery


@pytest.mark.parametrize("kind", ["folder", "tar"])
def test_discover_sorted_robot_scenes_only(roots, kind):
    ids = Rh20tAdapter().discover(roots[kind])
    expected = sorted(s.name for s in GOOD + [NO_GRIPPER])
    assert ids == expected
    assert not any("_human" in i for i in ids)


def test_registry_constructs_adapter_with_config_options():
    a = get_adapter("rh20t", camera="036422060215")
    assert isinstance(a, Rh20tAdapter) and a.slug == "rh20t" and a.unit_type == "recording"
    assert a.cfgs == {2}


def test_root_can_be_the_extracted_cfg_folder_itself(roots):
    ids = Rh20tAdapter().discover(roots["folder"] / S.CFG_DIR)
    assert ids == sorted(s.name for s in GOOD + [NO_GRIPPER])
    ir = Rh20tAdapter().read_unit(roots["folder"] / S.CFG_DIR, GOOD[0].name)
    assert validate_unit(ir) is None


def test_missing_and_empty_roots_are_source_errors(tmp_path):
    a = Rh20tAdapter()
    with pytest.raises(SourceError, match="does not exist"):
        a.discover(tmp_path / "nope")
    with pytest.raises(SourceError, match="no RH20T_cfgN"):
        a.discover(tmp_path)
    (tmp_path / "README.txt").write_text("x")
    (tmp_path / "RH20T_cfg2").mkdir()
    with pytest.raises(SourceError, match="no readable RH20T scenes"):
        a.discover(tmp_path)
    try:
        a.discover(tmp_path)
    except SourceError as exc:
        assert str(tmp_path.parent) not in str(exc)  # messages name the basename only


def test_unselected_cfg_is_a_source_error_naming_the_option(tmp_path):
    spec = _cfg3_folder(tmp_path)
    with pytest.raises(SourceError, match="none of the selected cfgs"):
        Rh20tAdapter().discover(tmp_path)
    a = Rh20tAdapter(cfgs=["cfg3"])
    assert a.discover(tmp_path) == [spec.name]
    assert a.read_unit(tmp_path, spec.name).unit["config_id"] == "cfg_0003"
    with pytest.raises(UnitError, match="not selected"):
        Rh20tAdapter().read_unit(tmp_path, spec.name)
    # a scene whose cfg field disagrees with its folder is reported, not read
    S.write_root(tmp_path, GOOD[:1], seed=0, size=SIZE, cfg_dir="RH20T_cfg3")
    assert a.discover(tmp_path) == [spec.name]
    assert any("scene of cfg 2 inside RH20T_cfg3" in r for _, r in a.issues)


# ---------------------------------------------------------------------------------------------------------------
# units: IR contract, ids, clocks, signals


@pytest.mark.parametrize("kind", ["folder", "tar"])
def test_read_unit_passes_validate_and_carries_ids(roots, kind):
    a = Rh20tAdapter()
    for spec in GOOD:
        ir = a.read_unit(roots[kind], spec.name)
        assert validate_unit(ir) is None, spec.name
        u = ir.unit
        assert u["unit_id"] == spec.name and u["source"] == "rh20t" and u["unit_type"] == "recording"
        assert u["task_id"] == f"task_{spec.task:04d}"
        assert u["operator_id"] == f"user_{spec.user:04d}"
        assert u["scene_id"] == f"scene_{spec.scene:04d}" and u["config_id"] == "cfg_0002"
        assert u["cameras"] == sorted(S.CAMERAS) and u["camera"] == S.PRIMARY
        assert u["arm_layout"] == "single_arm" and u["rating"] == spec.rating
        assert u["num_frames"] == spec.n_frames and 9.0 < u["fps"] < 11.0
        assert u["language"] is None and len(ir.segments) == 0
        assert ir.notes == [] or spec.transformed_drop_last


def test_licence_per_scene_id(roots):
    a = Rh20tAdapter()
    got = {s.scene: a.read_unit(roots["folder"], s.name).unit["licence"] for s in GOOD}
    assert got == {1: "CC BY-SA 4.0", 6: "CC BY-NC 4.0", 12: "unknown"}
    assert [licence_for_scene(i) for i in (0, 5, 10, 11)] == ["unknown", "CC BY-SA 4.0", "CC BY-NC 4.0", "unknown"]


def test_rating_minus_one_is_kept_raw(roots):
    ir = Rh20tAdapter().read_unit(roots["tar"], GOOD[3].name)
    assert ir.unit["rating"] == -1


def test_clock_is_seconds_from_first_frame_with_native_ms(roots):
    spec = GOOD[1]
    ir = Rh20tAdapter().read_unit(roots["folder"], spec.name)
    ts = np.asarray(_load(roots["folder"], spec, f"cam_{S.PRIMARY}/timestamps.npy")["color"])
    f = ir.frames.to_pydict()
    assert set(f["camera"]) == {S.PRIMARY}
    assert f["frame_index"] == list(range(len(ts)))
    assert f["native_ts"] == [float(t) for t in ts]
    assert f["native_ts"][0] > 1.6e12  # Unix ms kept as the native clock
    assert np.allclose(f["t_sec"], (ts - ts[0]) / 1000.0) and f["t_sec"][0] == 0.0


def test_signals_are_the_primary_cameras_transformed_values(roots):
    spec = GOOD[0]
    ir = Rh20tAdapter().read_unit(roots["folder"], spec.name)
    sig = ir.signals.to_pydict()
    assert sig["frame_index"] == list(range(spec.n_frames)) and set(sig["arm"]) == {"single"}
    assert sig["t_sec"] == ir.frames.column("t_sec").to_pylist()
    tcp = _load(roots["folder"], spec, "transformed/tcp_base.npy")[S.PRIMARY]
    ft = _load(roots["folder"], spec, "transformed/force_torque_base.npy")[S.PRIMARY]
    gr = _load(roots["folder"], spec, "transformed/gripper.npy")[S.PRIMARY]
    assert np.allclose(sig["pos_x"], [e["tcp"][0] for e in tcp])
    assert np.allclose(sig["pos_z"], [e["tcp"][2] for e in tcp])
    assert np.allclose(sig["force"], [np.linalg.norm(e["zeroed"][:3]) for e in ft])
    assert np.allclose(sig["gripper_width"], [gr[e["timestamp"]]["gripper_info"][0] for e in tcp])
    # the other camera's entries differ (they are aligned to its own clock): the adapter must not use them
    other = _load(roots["folder"], spec, "transformed/tcp_base.npy")[S.OVERHEAD]
    assert not np.allclose(sig["pos_x"], [e["tcp"][0] for e in other[: spec.n_frames]])
    assert ir.signals.column("speed").null_count == spec.n_frames  # RH20T has no TCP velocity: never invented
    assert ir.signals.column("gripper_effort").null_count == spec.n_frames


def test_transformed_stopping_one_step_early_gives_nearest_or_null(roots):
    spec = GOOD[1]  # transformed lists lack the camera's last timestamp
    ir = Rh20tAdapter().read_unit(roots["folder"], spec.name)
    ts = np.asarray(ir.frames.column("native_ts").to_pylist())
    px = ir.signals.column("pos_x").to_pylist()
    assert all(v is not None for v in px[:-1])
    gap = ts[-1] - ts[-2]
    assert (px[-1] is None) == (gap > 100)  # nearest sample within 100 ms, else null
    assert any("no usable sample within 100 ms for 1 of" in n for n in ir.notes) == (gap > 100)
    strict = Rh20tAdapter(sync_tolerance_ms=10).read_unit(roots["folder"], spec.name)
    assert strict.signals.column("pos_x").to_pylist()[-1] is None


def test_language_from_task_description_json(tmp_path, roots):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(roots["folder"] / S.CFG_DIR, root / S.CFG_DIR)
    (root / "task_description.json").write_text(
        json.dumps({"task_0001": {"task_description_english": "Pick up the block.", "task_description_chinese": "x"}})
    )
    a = Rh20tAdapter()
    assert a.read_unit(root, GOOD[0].name).unit["language"] == "Pick up the block."
    assert a.read_unit(root, GOOD[2].name).unit["language"] is None  # task_0008 not in the file


# ---------------------------------------------------------------------------------------------------------------
# frames


@pytest.mark.parametrize("kind", ["folder", "tar"])
def test_frames_decode_as_their_index(roots, kind):
    a = Rh20tAdapter()
    spec = GOOD[1]
    want = [spec.n_frames - 1, 0, 17, 17, 5]
    got = a.read_frames(roots[kind], spec.name, S.PRIMARY, want)
    assert sorted(got) == sorted(set(want))
    for i, img in got.items():
        assert img.dtype == np.uint8 and img.shape == (SIZE[1], SIZE[0], 3)
        assert decode_frame_index(img) == i
    other = a.read_frames(roots[kind], spec.name, S.OVERHEAD, [3, 9])
    assert {i: decode_frame_index(v) for i, v in other.items()} == {3: 3, 9: 9}


def test_tar_and_folder_give_identical_units_and_pixels(roots):
    a = Rh20tAdapter()
    for spec in GOOD:
        x, y = a.read_unit(roots["folder"], spec.name), a.read_unit(roots["tar"], spec.name)
        assert x.unit == y.unit and x.frames.equals(y.frames) and x.signals.equals(y.signals)
    fx = a.read_frames(roots["folder"], GOOD[0].name, S.PRIMARY, [1, 30])
    fy = a.read_frames(roots["tar"], GOOD[0].name, S.PRIMARY, [1, 30])
    assert all(np.array_equal(fx[i], fy[i]) for i in fx)


def test_read_frames_errors(roots):
    a = Rh20tAdapter()
    with pytest.raises(UnitError) as ei:  # an index past the end does not decode
        a.read_frames(roots["tar"], GOOD[0].name, S.PRIMARY, [3, N + 50])
    assert ei.value.file == f"RH20T_cfg2.tar.gz:{S.CFG_DIR}/{GOOD[0].name}/cam_{S.PRIMARY}/color.mp4"
    with pytest.raises(UnitError, match="missing cam_999/color.mp4"):
        a.read_frames(roots["folder"], GOOD[0].name, "999", [0])
    with pytest.raises(UnitError, match="invalid camera"):
        a.read_frames(roots["folder"], GOOD[0].name, "../cam", [0])


# ---------------------------------------------------------------------------------------------------------------
# odd cases


@pytest.mark.parametrize("kind", ["folder", "tar"])
def test_missing_gripper_is_a_unit_error_and_others_still_read(roots, kind):
    a = Rh20tAdapter()
    with pytest.raises(UnitError, match=r"missing transformed/gripper\.npy") as ei:
        a.read_unit(roots[kind], NO_GRIPPER.name)
    assert ei.value.file.endswith(f"{NO_GRIPPER.name}/transformed/gripper.npy")
    assert not os.path.isabs(ei.value.file) and str(roots[kind]) not in ei.value.file
    assert validate_unit(a.read_unit(roots[kind], GOOD[0].name)) is None


def test_human_folder_is_never_a_unit(roots):
    assert (roots["folder"] / S.CFG_DIR / HUMAN.name / f"cam_{S.PRIMARY}" / "color.mp4").is_file()
    a = Rh20tAdapter()
    assert HUMAN.name not in a.discover(roots["folder"])
    with pytest.raises(UnitError, match="not an RH20T robot scene"):
        a.read_unit(roots["folder"], HUMAN.name)
    with pytest.raises(UnitError, match="not an RH20T robot scene"):
        a.read_unit(roots["tar"], HUMAN2.name)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_color_mp4_is_a_unit_error(tmp_path, damage):
    bad = replace(GOOD[0], video_damage=damage)
    S.write_root(tmp_path, [bad, GOOD[2]], seed=1, size=SIZE)
    a = Rh20tAdapter()
    with pytest.raises(UnitError, match=r"cam_036422060215/color\.mp4 is unreadable") as ei:
        a.read_unit(tmp_path, bad.name)
    assert ei.value.file == f"{S.CFG_DIR}/{bad.name}/cam_036422060215/color.mp4"
    with pytest.raises(UnitError):
        a.read_frames(tmp_path, bad.name, S.PRIMARY, [0])
    assert validate_unit(a.read_unit(tmp_path, GOOD[2].name)) is None


def test_color_mp4_whose_frames_do_not_decode_is_a_unit_error(tmp_path):
    """The container and its sample table are intact (the frame count reads), the coded pictures are zeros: ingest
    decodes the first frame, so the scene is quarantined there, naming the video."""
    S.write_root(tmp_path, [GOOD[0]], seed=1, size=SIZE)
    mp4 = tmp_path / S.CFG_DIR / GOOD[0].name / f"cam_{S.PRIMARY}" / "color.mp4"
    data = mp4.read_bytes()
    at = data.index(b"mdat")
    size = int.from_bytes(data[at - 4 : at], "big")
    mp4.write_bytes(data[: at + 4] + bytes(size - 8) + data[at - 4 + size :])
    assert video.count_frames(mp4) > 0
    with pytest.raises(
        UnitError, match=r"cam_036422060215/color\.mp4 is unreadable: first frame does not decode"
    ) as ei:
        Rh20tAdapter().read_unit(tmp_path, GOOD[0].name)
    assert ei.value.file == f"{S.CFG_DIR}/{GOOD[0].name}/cam_036422060215/color.mp4"


def test_signal_samples_read_in_one_block_match_sample_by_sample():
    """transformed/ values are taken as one numpy block when they convert at once; a NaN leading value, a missing
    field, a short or ragged vector or a non-dict sample must give the same rows as reading sample by sample:
    NaN rows where a sample has no usable vector, the width of the longest usable one."""
    from upstream_adapters.rh20t.parse import _as_float, _samples

    def by_sample(items, n):  # the per-sample rule, written out
        vals = [_as_float(e.get("tcp"), n) if isinstance(e, dict) else None for _, e in items]
        width = max((len(v) for v in vals if v is not None), default=1)
        out = np.full((len(vals), width), np.nan)
        for i, v in enumerate(vals):
            if v is not None:
                out[i, : len(v)] = v
        return out

    good = [(1000 + 100 * i, {"tcp": np.arange(7.0) + i}) for i in range(5)]
    odd = {
        "uniform": None,
        "nan_leading": {"tcp": np.array([1.0, np.nan, 2, 3, 4, 5, 6])},
        "inf_after_n": {"tcp": np.array([1.0, 2, 3, np.inf, 4, 5, 6])},
        "missing": {},
        "none": {"tcp": None},
        "short": {"tcp": np.arange(2.0)},
        "ragged": {"tcp": np.arange(4.0)},
        "list": {"tcp": [1, 2, 3, 4, 5, 6, 7]},
        "not_a_dict": "x",
    }
    for case, entry in odd.items():
        items = good if entry is None else good[:2] + [(1200, entry)] + good[3:]
        for n in (3, 1):
            ts, got = _samples(dict(items), "tcp.npy", "where", "tcp", n)
            assert ts.tolist() == [t for t, _ in items], case
            want = by_sample(items, n)
            assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True), (case, n)
    all_bad = [(1000, {"tcp": None}), (1100, {"tcp": np.arange(2.0)})]
    assert _samples(dict(all_bad), "tcp.npy", "where", "tcp", 3)[1].shape == (2, 1)
    # list form: integer timestamps are taken at once; any other one is int()-ed per sample (dropped if it fails)
    for odd_ts, kept in ((None, None), (1250.7, 1250), ("1250", 1250), (np.int32(1250), 1250), (True, 1)):
        listed = [{"timestamp": t, **e} for t, e in good[:2]] + [{"timestamp": odd_ts, "tcp": np.full(7, 9.0)}]
        ts, got = _samples(listed, "tcp.npy", "where", "tcp", 3)
        assert ts.tolist() == sorted([1000, 1100] + ([] if kept is None else [kept])), odd_ts
        assert (got[ts.tolist().index(kept)] == 9.0).all() if kept is not None else got.shape == (2, 7)


def test_timestamp_vs_video_frame_count(tmp_path):
    plus1, minus1 = replace(GOOD[0], video_frame_delta=1), replace(GOOD[2], video_frame_delta=-1)
    plus3 = replace(GOOD[3], video_frame_delta=3)
    S.write_root(tmp_path, [plus1, minus1, plus3], seed=2, size=SIZE)
    a = Rh20tAdapter()
    # off by one: the common prefix is kept (frame i <-> timestamps[i])
    ir = a.read_unit(tmp_path, plus1.name)
    assert validate_unit(ir) is None and ir.unit["num_frames"] == plus1.n_frames
    assert any(f"kept the first {plus1.n_frames}" in n for n in ir.notes)
    ir = a.read_unit(tmp_path, minus1.name)
    assert validate_unit(ir) is None and ir.unit["num_frames"] == minus1.n_frames - 1
    assert len(ir.signals) == minus1.n_frames - 1
    with pytest.raises(UnitError, match=rf"has {plus3.n_frames + 3} frames but .* has {plus3.n_frames} timestamps"):
        a.read_unit(tmp_path, plus3.name)
    with pytest.raises(UnitError, match="tolerance 0"):
        Rh20tAdapter(frame_count_tolerance=0).read_unit(tmp_path, plus1.name)


def test_unsorted_timestamps_are_sorted_with_a_note_as_the_official_api(tmp_path):
    spec = GOOD[0]
    S.write_root(tmp_path, [spec], seed=2, size=SIZE)
    p = tmp_path / S.CFG_DIR / spec.name / f"cam_{S.PRIMARY}/timestamps.npy"
    ts = np.load(p, allow_pickle=True).item()
    want = list(ts["color"])
    ts["color"][3], ts["color"][4] = ts["color"][4], ts["color"][3]
    np.save(p, ts, allow_pickle=True)
    ir = Rh20tAdapter().read_unit(tmp_path, spec.name)
    assert validate_unit(ir) is None
    assert ir.frames.column("native_ts").to_pylist()[: len(want)] == [float(t) for t in want][: ir.frames.num_rows]
    assert any("sorted, as the official rh20t_api does" in n for n in ir.notes)


def test_bad_timestamps_and_metadata_are_unit_errors(tmp_path):
    specs = [GOOD[0], GOOD[2], GOOD[3]]
    S.write_root(tmp_path, specs, seed=2, size=SIZE)
    d0, d1, d2 = (tmp_path / S.CFG_DIR / s.name for s in specs)
    ts = np.load(d0 / f"cam_{S.PRIMARY}/timestamps.npy", allow_pickle=True).item()
    ts["color"][5] = ts["color"][4]
    np.save(d0 / f"cam_{S.PRIMARY}/timestamps.npy", ts, allow_pickle=True)  # a duplicate: refused
    (d1 / "metadata.json").write_text("{not json")
    meta = json.loads((d2 / "metadata.json").read_text())
    meta["rating"] = "good"
    (d2 / "metadata.json").write_text(json.dumps(meta))
    a = Rh20tAdapter()
    with pytest.raises(UnitError, match="not strictly increasing"):
        a.read_unit(tmp_path, specs[0].name)
    with pytest.raises(UnitError, match="not valid JSON"):
        a.read_unit(tmp_path, specs[1].name)
    with pytest.raises(UnitError, match="rating 'good' is not an integer"):
        a.read_unit(tmp_path, specs[2].name)


def test_primary_camera_absent_from_transformed_dict(tmp_path):
    spec = GOOD[0]
    S.write_root(tmp_path, [spec], seed=2, size=SIZE)
    p = tmp_path / S.CFG_DIR / spec.name / "transformed/force_torque_base.npy"
    d = np.load(p, allow_pickle=True).item()
    del d[S.PRIMARY]
    np.save(p, d, allow_pickle=True)
    with pytest.raises(UnitError, match="force_torque_base.npy has no entry for camera 036422060215"):
        Rh20tAdapter().read_unit(tmp_path, spec.name)


class _Evil:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_pickled_code_in_npy_is_refused(tmp_path, capsys):
    spec = GOOD[0]
    S.write_root(tmp_path, [spec], seed=2, size=SIZE)
    p = tmp_path / S.CFG_DIR / spec.name / "transformed/gripper.npy"
    arr = np.empty((), dtype=object)
    arr[()] = {S.PRIMARY: _Evil()}
    np.save(p, arr, allow_pickle=True)
    with pytest.raises(UnitError, match="builtins.print is not allowed"):
        Rh20tAdapter().read_unit(tmp_path, spec.name)
    assert "pickle code ran" not in capsys.readouterr().out


def test_scene_folders_and_files_linked_from_another_disk_are_read(tmp_path):
    root = tmp_path / "root"
    S.write_root(root, [GOOD[0]], seed=4, size=SIZE)
    outside = tmp_path / "outside"
    S.write_root(outside, [GOOD[2]], seed=4, size=SIZE)
    os.symlink(outside / S.CFG_DIR / GOOD[2].name, root / S.CFG_DIR / GOOD[2].name)  # scene dir -> elsewhere
    a = Rh20tAdapter()
    assert a.discover(root) == sorted([GOOD[0].name, GOOD[2].name])
    assert validate_unit(a.read_unit(root, GOOD[2].name)) is None
    # a file inside a scene linked from elsewhere
    mp4 = root / S.CFG_DIR / GOOD[0].name / f"cam_{S.OVERHEAD}" / "color.mp4"
    mp4.unlink()
    os.symlink(outside / S.CFG_DIR / GOOD[2].name / f"cam_{S.OVERHEAD}" / "color.mp4", mp4)
    assert a.read_frames(root, GOOD[0].name, S.OVERHEAD, [0])[0].shape[2] == 3


def test_unsafe_and_link_members_in_an_archive(tmp_path):
    files = {f"{S.CFG_DIR}/{GOOD[0].name}/{k}": v for k, v in S.scene_files(GOOD[0], 5, SIZE).items()}
    files[f"{S.CFG_DIR}/../evil.txt"] = b"x"
    S.write_tar_gz(tmp_path / "RH20T_cfg2.tar.gz", files)
    a = Rh20tAdapter()
    assert a.discover(tmp_path) == [GOOD[0].name]
    assert any("unsafe member" in r for _, r in a.issues)
    # a symlink member where color.mp4 should be
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in sorted(files.items()):
            if name.endswith(f"cam_{S.PRIMARY}/color.mp4"):
                ti = tarfile.TarInfo(name)
                ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tf.addfile(ti)
            elif ".." not in name:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    (tmp_path / "RH20T_cfg2.tar.gz").write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    with pytest.raises(UnitError, match="not a regular file"):
        Rh20tAdapter().read_unit(tmp_path, GOOD[0].name)


# ---------------------------------------------------------------------------------------------------------------
# archives


def _cfg3_folder(root: Path) -> S.SceneSpec:
    spec = S.SceneSpec(3, 4, 2, cfg=3, rating=6, n_frames=N)
    S.write_root(root, [spec], seed=6, size=SIZE, cfg_dir="RH20T_cfg3")
    return spec


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_archive_is_reported_and_other_cfgs_still_read(tmp_path, roots, how):
    tar = tmp_path / "RH20T_cfg2.tar.gz"
    data = (roots["tar"] / "RH20T_cfg2.tar.gz").read_bytes()
    if how == "truncate":
        tar.write_bytes(data[: int(len(data) * 0.7)])
    else:
        mid = bytearray(data)
        for k in range(len(mid) // 2, len(mid) // 2 + 64):
            mid[k] ^= 0x5A
        tar.write_bytes(bytes(mid))
    spec3 = _cfg3_folder(tmp_path)
    a = Rh20tAdapter(cfgs=["cfg2", "cfg3"])
    ids = a.discover(tmp_path)
    assert spec3.name in ids
    assert [f for f, _ in a.issues] == ["RH20T_cfg2.tar.gz"] and "damaged archive" in a.issues[0][1]
    assert validate_unit(a.read_unit(tmp_path, spec3.name)) is None
    seen = [i for i in ids if i != spec3.name]
    assert seen, "scenes seen before the damage are listed (so they are quarantined, not silently lost)"
    for u in seen:
        with pytest.raises(UnitError, match="archive RH20T_cfg2.tar.gz is damaged") as ei:
            a.read_unit(tmp_path, u)
        assert ei.value.file == "RH20T_cfg2.tar.gz"
    # the same damaged archive alone: nothing readable -> SourceError naming it
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "RH20T_cfg2.tar.gz").write_bytes(tar.read_bytes())
    with pytest.raises(SourceError, match="RH20T_cfg2.tar.gz: damaged archive"):
        Rh20tAdapter().discover(alone)


def test_archive_linked_from_another_disk_is_read(tmp_path, roots):
    (tmp_path / "root").mkdir()
    os.symlink(roots["tar"] / "RH20T_cfg2.tar.gz", tmp_path / "root" / "RH20T_cfg2.tar.gz")
    ids = Rh20tAdapter().discover(tmp_path / "root")
    assert ids == Rh20tAdapter().discover(roots["tar"])
    assert validate_unit(Rh20tAdapter().read_unit(tmp_path / "root", ids[0])) is None


def test_not_a_gzip_archive_is_a_source_error(tmp_path):
    (tmp_path / "RH20T_cfg2.tar.gz").write_bytes(b"<html>404 not found</html>")
    with pytest.raises(SourceError, match="damaged archive"):
        Rh20tAdapter().discover(tmp_path)


def test_folder_wins_over_archive_for_the_same_scene(tmp_path, roots):
    shutil.copy(roots["tar"] / "RH20T_cfg2.tar.gz", tmp_path / "RH20T_cfg2.tar.gz")
    S.write_root(tmp_path, [GOOD[0]], seed=99, size=SIZE)  # a different recording under the same name
    a = Rh20tAdapter()
    assert a.discover(tmp_path) == sorted(s.name for s in GOOD + [NO_GRIPPER])
    from_folder = a.read_unit(tmp_path, GOOD[0].name)
    assert from_folder.frames.equals(a.read_unit(roots["folder"], GOOD[0].name).frames) is False
    assert validate_unit(a.read_unit(tmp_path, GOOD[1].name)) is None  # only in the archive


def test_archive_random_access_with_checkpoints_matches_tarfile(roots):
    path = roots["tar"] / "RH20T_cfg2.tar.gz"
    st = path.stat()
    arc = _Archive.build(path, path.name, (str(path), st.st_size, st.st_mtime_ns), span=32 << 10)
    assert arc.damage is None and len(arc.checkpoints.points) > 2
    with tarfile.open(path) as tf:
        truth = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}
    members = [m for sc in arc.scenes.values() for m in sc.values() if m.kind == "file"]
    rng = np.random.default_rng(0)
    for k in rng.permutation(len(members))[:25]:  # random order: backward seeks restore checkpoints
        m = members[k]
        assert arc.read(path, [m])[m.name] == truth[m.name]


def test_multi_member_gzip_archive_reads(tmp_path, roots):
    raw = gzip.decompress((roots["tar"] / "RH20T_cfg2.tar.gz").read_bytes())
    cut = len(raw) // 3
    (tmp_path / "RH20T_cfg2.tar.gz").write_bytes(gzip.compress(raw[:cut], mtime=0) + gzip.compress(raw[cut:], mtime=0))
    a = Rh20tAdapter()
    assert a.discover(tmp_path) == sorted(s.name for s in GOOD + [NO_GRIPPER])
    for spec in GOOD:
        assert validate_unit(a.read_unit(tmp_path, spec.name)) is None


# ---------------------------------------------------------------------------------------------------------------
# generator


def test_generator_is_deterministic_and_files_match_the_real_formats(tmp_path):
    spec = GOOD[1]
    a, b = S.scene_files(spec, 7, SIZE), S.scene_files(spec, 7, SIZE)
    assert a == b and a != S.scene_files(spec, 8, SIZE)
    S.write_tar_gz(tmp_path / "x.tar.gz", {"RH20T_cfg2/" + k: v for k, v in a.items()})
    S.write_tar_gz(tmp_path / "y.tar.gz", {"RH20T_cfg2/" + k: v for k, v in a.items()})
    assert (tmp_path / "x.tar.gz").read_bytes() == (tmp_path / "y.tar.gz").read_bytes()
    with tarfile.open(tmp_path / "x.tar.gz") as tf:
        m = tf.getmember("RH20T_cfg2/metadata.json")
        assert (m.mtime, m.uid, m.uname) == (S.TAR_MTIME, 0, "root")
    meta = json.loads(a["metadata.json"])
    assert set(meta) == {"finish_time", "rating", "calib", "calib_quality"} and meta["rating"] == 1
    ts = load_npy(a[f"cam_{S.PRIMARY}/timestamps.npy"])
    assert set(ts) == {"color", "depth"} and all(type(t) is int for t in ts["color"])
    tcp = np.load(io.BytesIO(a["transformed/tcp_base.npy"]), allow_pickle=True).item()
    assert set(tcp) == set(S.CAMERAS) and tcp[S.PRIMARY][0]["tcp"].shape == (7,)
    assert np.isclose(np.linalg.norm(tcp[S.PRIMARY][0]["tcp"][3:]), 1.0)  # wxyz unit quaternion
    gr = np.load(io.BytesIO(a["transformed/gripper.npy"]), allow_pickle=True).item()
    first = gr[S.PRIMARY][ts["color"][0]]
    assert set(first) == {"gripper_command", "gripper_info"}
    ft = np.load(io.BytesIO(a["transformed/force_torque_base.npy"]), allow_pickle=True).item()
    assert set(ft[S.PRIMARY][0]) == {"timestamp", "raw", "zeroed"}
    assert len(tcp[S.PRIMARY]) == spec.n_frames - 1  # transformed_drop_last


@pytest.mark.parametrize("rating,failure", [(6, None), (1, "miss"), (1, "drop"), (0, "estop")])
def test_signals_let_every_label_rule_fire(rating, failure):
    spec = S.SceneSpec(12, 3, 4, rating=rating, failure=failure, n_frames=200)
    tr = S.trajectory(spec, 0)
    pos, width, force = tr["pos"], tr["width"], np.linalg.norm(tr["force"], axis=1)
    speed = np.linalg.norm(np.diff(pos, axis=0), axis=1) / 0.1
    assert (speed > 0.06).sum() >= 20 and (speed < 0.02).sum() >= 20  # moving and stationary stretches
    win = pos[30:] - pos[:-30]  # 3 s windows (T3 uses offsets -20..+10 at 10 Hz)
    if failure != "estop":
        assert (win[:, 0] > 0.03).any() and (win[:, 0] < -0.03).any()
        assert (win[:, 1] > 0.03).any() and (win[:, 1] < -0.03).any()
    if failure == "miss":
        assert force.max() < 2.0 and width.min() < 4.0  # closed on nothing
    else:
        assert force.max() > 3.0 and force[:5].max() < 1.0 and width.min() < tr["w_open"] - 15
    if failure is None:
        assert force[-5:].max() < 1.0 and width[-1] > tr["w_open"] - 2  # released
    if failure == "estop":
        assert np.ptp(pos[tr["bounds"]["estop"] :], axis=0).max() < 0.003  # frozen


def test_demo_and_release_compositions():
    demo = S.demo_specs(0)
    robots = [s for s in demo if s.human is None and not s.omit]
    assert 8 <= len(robots) <= 10 and len({s.task for s in robots}) in (3, 4)
    assert any(s.human is not None for s in demo) and any("transformed/gripper.npy" in s.omit for s in demo)
    assert {licence_for_scene(s.scene) for s in robots} == {"CC BY-SA 4.0", "CC BY-NC 4.0"}
    assert any(s.rating == -1 for s in robots) and sum(s.rating in (0, 1) for s in robots) >= 2
    assert all(150 <= s.n_frames <= 200 for s in robots)
    rel = S.release_specs(0)
    robots = [s for s in rel if s.human is None and not s.omit]
    assert len(robots) == 596 and len({s.task for s in robots}) == 76
    assert len({s.name for s in rel}) == len(rel)  # never the same scene twice
    fail = sum(s.rating in (0, 1) for s in robots) / len(robots)
    assert 0.22 <= fail <= 0.33 and any(s.rating == -1 for s in robots)
    assert all(200 <= s.n_frames <= 260 for s in robots)
    # T7 balances success/failure: ~2000 failure items over failure scenes with frames >= 10 apart
    assert sum(s.n_frames // 10 for s in robots if s.rating in (0, 1)) >= 2000
    assert sum(s.n_frames // 10 for s in robots) >= 4000 + 2300


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_npy_pickles_written_by_numpy_1x_load(protocol):
    """RH20T (2023) was saved with numpy 1.x: pickles name numpy.core.multiarray, protocol 3."""
    import pickle

    from numpy.lib import format as npf

    d = {S.PRIMARY: [{"timestamp": np.int64(5), "tcp": np.arange(7.0)}], "color": [1, 2]}
    arr = np.empty((), object)
    arr[()] = d
    bio = io.BytesIO()
    npf.write_array_header_1_0(bio, npf.header_data_from_array_1_0(arr))
    payload = pickle.dumps(arr, protocol=protocol)
    if protocol < 4:  # text GLOBAL opcodes: rename as numpy 1.x wrote them
        payload = payload.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    bio.write(payload)
    got = load_npy(bio.getvalue())
    assert got["color"] == [1, 2] and np.array_equal(got[S.PRIMARY][0]["tcp"], np.arange(7.0))


def test_root_given_as_the_archive_file_itself(tmp_path, roots):
    tar = roots["tar"] / "RH20T_cfg2.tar.gz"
    a = Rh20tAdapter()
    ids = a.discover(tar)
    assert ids == Rh20tAdapter().discover(roots["tar"])
    x = a.read_unit(tar, ids[0])
    y = Rh20tAdapter().read_unit(roots["tar"], ids[0])
    assert validate_unit(x) is None and x.unit == y.unit and x.frames.equals(y.frames)
    assert np.array_equal(
        a.read_frames(tar, ids[0], S.PRIMARY, [1])[1],
        Rh20tAdapter().read_frames(roots["tar"], ids[0], S.PRIMARY, [1])[1],
    )
    with pytest.raises(SourceError, match="none of the selected cfgs"):
        Rh20tAdapter(cfgs=["cfg3"]).discover(tar)


def test_generator_writes_either_layout(tmp_path):
    S.write(tmp_path / "tar", scale="demo", seed=1, archive=True)
    S.write(tmp_path / "dir", scale="demo", seed=1, archive=False)
    assert [p.name for p in (tmp_path / "tar").iterdir()] == ["RH20T_cfg2.tar.gz"]
    assert (tmp_path / "dir" / "RH20T_cfg2").is_dir()
    assert Rh20tAdapter().discover(tmp_path / "tar") == Rh20tAdapter().discover(tmp_path / "dir")


def _scene_by_hand(base: Path, serial: str, n: int = 20, with_gripper: bool = True) -> None:
    """An RH20T scene folder written directly with numpy/json/PyAV (not our generator); frame i is grey level 8 * i."""
    import av

    (base / f"cam_{serial}").mkdir(parents=True)
    (base / "transformed").mkdir()
    (base / "metadata.json").write_text(json.dumps({"finish_time": 1, "rating": 7, "calib": 1, "calib_quality": 1}))
    with av.open(str(base / f"cam_{serial}" / "color.mp4"), "w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 32, 24, "yuv420p"
        for i in range(n):
            for p in s.encode(av.VideoFrame.from_ndarray(np.full((24, 32, 3), 8 * i, np.uint8), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    ts = [1_600_000_000_000 + 100 * i for i in range(n)]
    np.save(base / f"cam_{serial}" / "timestamps.npy", {"color": ts, "depth": ts}, allow_pickle=True)
    np.save(
        base / "transformed" / "tcp_base.npy",
        {serial: [{"timestamp": t, "tcp": np.array([0.1 * i, 0.2, 0.3, 1, 0, 0, 0])} for i, t in enumerate(ts)]},
        allow_pickle=True,
    )
    np.save(
        base / "transformed" / "force_torque_base.npy",
        {serial: [{"timestamp": t, "zeroed": np.array([3.0, 4.0, 0, 0, 0, 0])} for t in ts]},
        allow_pickle=True,
    )
    if with_gripper:
        np.save(
            base / "transformed" / "gripper.npy",
            {serial: {t: {"gripper_info": [0.05, 0, 0]} for t in ts}},
            allow_pickle=True,
        )


def test_independent_scene_folders_good_broken_and_frame_order(tmp_path):
    serial = "036422060215"
    cfg = tmp_path / "RH20T_cfg2"
    good, broken = "task_0001_user_0001_scene_0001_cfg_0002", "task_0002_user_0001_scene_0001_cfg_0002"
    _scene_by_hand(cfg / good, serial)
    _scene_by_hand(cfg / broken, serial, with_gripper=False)
    a = Rh20tAdapter()
    assert a.discover(tmp_path) == [good, broken]
    ir = a.read_unit(tmp_path, good)
    assert validate_unit(ir) is None and ir.unit["num_frames"] == 20 and ir.unit["rating"] == 7
    assert ir.signals.column("force").to_pylist()[0] == pytest.approx(5.0)
    with pytest.raises(UnitError, match="missing transformed/gripper.npy") as e:
        a.read_unit(tmp_path, broken)
    assert e.value.file == f"RH20T_cfg2/{broken}/transformed/gripper.npy"
    got = a.read_frames(tmp_path, good, serial, [0, 9, 19])
    assert all(abs(float(got[i].mean()) - 8 * i) < 4 for i in (0, 9, 19))  # frame i is frame i
