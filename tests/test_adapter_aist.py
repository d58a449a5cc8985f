"""AIST-Bimanual adapter + sample generator: layout, IR contract, clocks, signals, frames and every odd case."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import io

import h5py
import numpy as np
import pytest

from upstream_adapters import get_adapter
from upstream_adapters.aist.adapter import MANIFEST, AistAdapter
from upstream_adapters.ir import SourceError, UnitError, validate_unit
from upstream_adapters.samples import aist as samples
from upstream_adapters.samples.common import decode_frame_index

DEMO_IDS = [f"{t}_episode_{n}" for t in ("task_004", "task_066", "task_084") for n in range(3)]
TASK = {t[0]: t for t in samples.TASKS}
N = 60  # frames of the tiny odd-case episodes


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("aist") / "aist"
    samples.write(root)  # the default demo corpus
    return root


def ep_bytes(tid: str, ep: int, n: int = N, **kw) -> bytes:
    _, name, taxonomy, prompt = TASK[tid]
    return samples.episode_bytes(tid, name, taxonomy, prompt, ep, n, (64, 48), seed=0, **kw)


def small_root(
    tmp_path: Path,
    episodes: dict[str, dict[str, bytes]] | None = None,
    manifest: bool = True,
    compression: int = zipfile.ZIP_DEFLATED,
) -> Path:
    """task_004 (2 good episodes) and task_089 (1 good episode) unless `episodes` says otherwise."""
    root = tmp_path / "aist"
    root.mkdir(parents=True)
    if manifest:
        samples.write_manifest(root)
    if episodes is None:
        episodes = {
            "task_004": {f"insert_usb_cable/episode_{i}.hdf5": ep_bytes("task_004", i) for i in range(2)},
            "task_089": {"close_cardboard_box/episode_0.hdf5": ep_bytes("task_089", 0)},
        }
    for tid, members in episodes.items():
        name = TASK[tid][1]
        samples.write_task_zip(root / f"{name}.zip", members, compression=compression, directory=name)
    return root


def member_h5(root: Path, zip_name: str, member: str) -> h5py.File:
    with zipfile.ZipFile(root / zip_name) as zf:
        return h5py.File(io.BytesIO(zf.read(member)), "r")


# ------------------------------------------------------------------------------------------------ discovery


def test_discover_sorted_and_filtered(demo):
    adapter = get_adapter("aist", camera="cam_high")
    assert isinstance(adapter, AistAdapter)
    assert adapter.discover(demo) == DEMO_IDS
    assert AistAdapter(tasks=["task_066"]).discover(demo) == [f"task_066_episode_{n}" for n in range(3)]
    # lexicographic order, episode numbers are not padded
    root = Path(str(demo) + "_many")
    shutil.copytree(demo, root)
    members = {f"close_cardboard_box/episode_{i}.hdf5": ep_bytes("task_089", 0, n=20) for i in (0, 2, 10)}
    samples.write_task_zip(root / "close_cardboard_box.zip", members, directory="close_cardboard_box")
    ids = AistAdapter(tasks=["task_089"]).discover(root)
    assert ids == ["task_089_episode_0", "task_089_episode_10", "task_089_episode_2"] == sorted(ids)


def test_read_unit_contract(demo):
    adapter = AistAdapter()
    for uid in DEMO_IDS:
        ir = adapter.read_unit(demo, uid)
        assert validate_unit(ir) is None, uid
        u = ir.unit
        tid = uid.split("_episode_")[0]
        assert (u["source"], u["unit_id"], u["unit_type"], u["task_id"]) == ("aist", uid, "recording", tid)
        assert u["licence"] == "CC BY 4.0"
        assert u["arm_layout"] == "bimanual"
        assert u["taxonomy"] == TASK[tid][2]
        assert u["language"] == TASK[tid][3]
        assert u["cameras"] == ["cam_high", "cam_low"] and u["camera"] == "cam_high"
        assert u["fps"] == 50.0
        assert 400 <= u["num_frames"] <= 500
        assert u["operator_id"] is None and u["rating"] is None
        assert ir.segments.num_rows == 0


def test_clock_normalised(demo):
    ir = AistAdapter().read_unit(demo, "task_004_episode_1")
    n = ir.unit["num_frames"]
    for cam in ("cam_high", "cam_low"):
        rows = [r for r in ir.frames.to_pylist() if r["camera"] == cam]
        assert [r["frame_index"] for r in rows] == list(range(n))
        assert np.allclose([r["t_sec"] for r in rows], np.arange(n) / 50.0)
        assert [r["native_ts"] for r in rows] == [float(i) for i in range(n)]  # the row index


def test_signals_are_the_hdf5_values(demo):
    ir = AistAdapter().read_unit(demo, "task_084_episode_0")
    n = ir.unit["num_frames"]
    with member_h5(demo, "open_toolbox.zip", "open_toolbox/episode_0.hdf5") as f:
        qpos = f["observations/qpos"][()].astype(float)
        qvel = f["observations/qvel"][()].astype(float)
    assert qpos.shape == (n, 14)
    sig = ir.signals.to_pydict()
    arm = np.array(sig["arm"])
    assert sorted(set(arm)) == ["left", "right"]
    for name, x, y, joints, grip in (("left", 0, 1, slice(0, 6), 6), ("right", 7, 8, slice(7, 13), 13)):
        sel = arm == name
        assert list(np.array(sig["frame_index"])[sel]) == list(range(n))
        assert np.allclose(np.array(sig["t_sec"])[sel], np.arange(n) / 50.0)
        assert np.allclose(np.array(sig["pos_x"])[sel], qpos[:, x])
        assert np.allclose(np.array(sig["pos_y"])[sel], qpos[:, y])
        assert np.allclose(np.array(sig["speed"])[sel], np.linalg.norm(qvel[:, joints], axis=1))
        assert np.allclose(np.array(sig["gripper_width"])[sel], qpos[:, grip])
    for col in ("pos_z", "gripper_effort", "force"):
        assert ir.signals.column(col).null_count == 2 * n
    # configurable joint proxies
    ir2 = AistAdapter(left_xy=(2, 3), right_xy=(9, 10)).read_unit(demo, "task_084_episode_0")
    right = ir2.signals.filter(np.array(ir2.signals.column("arm").to_pylist()) == "right")
    assert np.allclose(right.column("pos_y").to_numpy(), qpos[:, 10])


def test_frames_decode_as_their_index_in_rgb(demo):
    adapter = AistAdapter()
    uid = "task_004_episode_2"
    n = adapter.read_unit(demo, uid).unit["num_frames"]
    want = [n - 1, 0, 1, 2, 3, 77, 200, 200]
    for cam in ("cam_high", "cam_low"):
        frames = adapter.read_frames(demo, uid, cam, want)
        assert sorted(frames) == sorted(set(want))
        for i, img in frames.items():
            assert img.shape == (72, 96, 3) and img.dtype == np.uint8
            assert decode_frame_index(img) == i
    # RGB, not BGR: the decoded frame is close to the re-rendered original (the swapped one is not)
    with member_h5(demo, "insert_usb_cable.zip", "insert_usb_cable/episode_2.hdf5") as f:
        qpos = f["observations/qpos"][()]
    left, right = samples.marker_uv(qpos, "left"), samples.marker_uv(qpos, "right")
    img = adapter.read_frames(demo, uid, "cam_high", [77])[77].astype(int)
    ref = samples.render_pair(77, 96, 72, left[77], qpos[77, 6], right[77], qpos[77, 13]).astype(int)
    straight, swapped = np.abs(img - ref).mean(), np.abs(img[..., ::-1] - ref).mean()
    assert straight < 6 and swapped > 3 * straight, (straight, swapped)


def test_read_frames_reads_only_requested_rows(demo, monkeypatch):
    seen = []
    orig = h5py.Dataset.__getitem__

    def spy(self, key):
        if self.name.startswith("/observations/images/"):
            seen.append(key)
        return orig(self, key)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    AistAdapter().read_frames(demo, "task_066_episode_1", "cam_high", [10, 11, 12, 300])
    assert seen == [slice(10, 13), slice(300, 301)]


def test_sample_motion_covers_every_label(demo):
    """Each arm: moving in all four joint-space directions, stationary stretches, gripper open and closed;
    bimanual states both/left/right/idle all present; images follow the documented direction mapping."""
    adapter = AistAdapter()
    for uid in DEMO_IDS:
        ir = adapter.read_unit(demo, uid)
        sig = ir.signals.to_pydict()
        arm = np.array(sig["arm"])
        active = {}
        for name in ("left", "right"):
            sel = arm == name
            x, y = np.array(sig["pos_x"])[sel], np.array(sig["pos_y"])[sel]
            speed = np.convolve(np.array(sig["speed"])[sel], np.ones(9) / 9, mode="same")
            active[name] = speed > 0.15
            grip = np.array(sig["gripper_width"])[sel]
            assert grip.max() > 0.7 and grip.min() < 0.3, (uid, name)
            dirs = set()
            for s in range(0, len(x) - 20, 5):
                dx, dy = x[s + 20] - x[s], y[s + 20] - y[s]
                if max(abs(dx), abs(dy)) > 0.05 and max(abs(dx), abs(dy)) > 3 * min(abs(dx), abs(dy)):
                    dirs.add(("+" if dx > 0 else "-") + "x" if abs(dx) > abs(dy) else ("+" if dy > 0 else "-") + "y")
            assert dirs == {"+x", "-x", "+y", "-y"}, (uid, name, dirs)
            assert 0.15 < active[name].mean() < 0.45, (uid, name)
        lt, rt = active["left"], active["right"]
        states = {"both": lt & rt, "left": lt & ~rt, "right": ~lt & rt, "idle": ~lt & ~rt}
        for state, mask in states.items():
            assert mask.sum() >= 15, (uid, state)

    # images: left marker (yellow) goes up on cam_high when left qpos[0] increases (mapping in the module doc)
    uid = "task_004_episode_0"
    ir = adapter.read_unit(demo, uid)
    _, _, _, stretches = samples.episode_signals(0, "task_004", 0, ir.unit["num_frames"])
    checked = 0
    for arm_name, colour in (("left", (250, 220, 40)), ("right", samples.RIGHT_COLOUR)):
        for a, b, d in stretches[arm_name]:
            frames = adapter.read_frames(demo, uid, "cam_high", [a, b - 1])

            def centre(img):
                ys, xs = np.nonzero(np.abs(img.astype(int) - colour).sum(axis=2) < 60)
                return xs.mean(), ys.mean()

            (u0, v0), (u1, v1) = centre(frames[a]), centre(frames[b - 1])
            du, dv = u1 - u0, v1 - v0
            expect = {
                "+y": (-1, 0),
                "-y": (1, 0),
                "+x": (0, -1 if arm_name == "left" else 1),
                "-x": (0, 1 if arm_name == "left" else -1),
            }[d]
            moved = du if expect[0] else dv
            assert np.sign(moved) == (expect[0] or expect[1]) and abs(moved) >= 2, (arm_name, d, du, dv)
            checked += 1
    assert checked >= 8


def test_generator_is_deterministic(tmp_path):
    kw = dict(tasks=["task_089"], episodes=1, frames=(40, 40), size=(64, 48))
    samples.write(tmp_path / "a", **kw)
    samples.write(tmp_path / "b", **kw)
    names = sorted(os.listdir(tmp_path / "a"))
    assert names == [MANIFEST, "close_cardboard_box.zip"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    with zipfile.ZipFile(tmp_path / "a" / "close_cardboard_box.zip") as zf:
        assert zf.namelist() == ["close_cardboard_box/", "close_cardboard_box/episode_0.hdf5"]
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())
        with h5py.File(io.BytesIO(zf.read("close_cardboard_box/episode_0.hdf5")), "r") as f:
            assert f.attrs["Task name"] == "close_cardboard_box" and f.attrs["frame_rate"] == 50
            assert f["observations/qpos"].shape == (40, 14) and f["observations/images/cam_low"].dtype == np.uint8
            assert f["observations/depth/cam_high"].shape[0] == 40 and len(f["observations/sound"]) == 0
            assert f["text/prompt"][()] == b"Close the cardboard box."


def test_release_bouts_carry_stable_coordination_windows():
    """Release-scale episodes (signals only): with the build's activity rule (configs/labels.yaml), each arm moves for
    under ~30 % of the episode, so the 0.70-quantile threshold stays below the bouts' speeds, the labels agree
    with the generator's blocks, and every coordination state has a stable run longer than T4's 45-frame window
    (offsets -30..+15) in every episode."""
    from pipeline import labels as L
    from pipeline.settings.config import load_settings

    spec = load_settings().labels.activity.for_source("aist").model_dump()
    tasks, episodes, frames, _ = samples.SCALES["release"]
    code = {"both": 0, "left": 1, "right": 2, "idle": 3}
    for tid in tasks:
        for ep in range(episodes):
            n = samples.frame_count(7, tid, ep, frames)
            _, qvel, blocks, _ = samples.episode_signals(7, tid, ep, n)
            active = {}
            for arm, off in (("left", 0), ("right", 7)):
                speed = np.linalg.norm(qvel[:, off : off + 6].astype(np.float64), axis=1)
                active[arm], meta = L.activity_mask(speed, spec)
                assert meta["threshold"] < 0.25, (tid, ep, arm, meta)  # bouts move at >= 0.3 rad/s
            coord = L.stable_codes(
                L.coordination_codes(active["left"], active["right"]),
                int(spec["transition_margin"]),
                int(spec["min_stable_run"]),
            )
            truth = np.full(n, 3)
            for kind, s, _, e in blocks:
                truth[s:e] = code[kind]
            labelled = coord >= 0
            assert labelled.mean() > 0.8 and (coord[labelled] == truth[labelled]).mean() > 0.99, (tid, ep)
            longest = {}
            for s, e, v in L.value_runs(coord):
                longest[int(v)] = max(longest.get(int(v), 0), e - s)
            assert all(longest.get(k, 0) >= 80 for k in range(4)), (tid, ep, longest)


# ------------------------------------------------------------------------------------------------ layouts


def test_extracted_folder_stored_zip_and_selected20_layouts(tmp_path):
    zipped = small_root(tmp_path)
    ids = ["task_004_episode_0", "task_004_episode_1", "task_089_episode_0"]
    adapter = AistAdapter()
    assert adapter.discover(zipped) == ids
    ref = adapter.read_frames(zipped, "task_004_episode_1", "cam_high", [5, 59])

    # stored (uncompressed) members are read through a window on the zip file
    stored = small_root(tmp_path / "s", compression=zipfile.ZIP_STORED)
    got = adapter.read_frames(stored, "task_004_episode_1", "cam_high", [5, 59])
    assert all(np.array_equal(ref[i], got[i]) for i in ref)
    assert validate_unit(adapter.read_unit(stored, "task_004_episode_1")) is None

    # the zip extracted into the root
    extracted = tmp_path / "x"
    shutil.copytree(zipped, extracted)
    with zipfile.ZipFile(extracted / "insert_usb_cable.zip") as zf:
        zf.extractall(extracted)
    (extracted / "insert_usb_cable.zip").unlink()
    assert adapter.discover(extracted) == ids
    got = adapter.read_frames(extracted, "task_004_episode_1", "cam_high", [5, 59])
    assert all(np.array_equal(ref[i], got[i]) for i in ref)

    # ProcessBench's selected20 re-layout task_XXX/<task_name>/episode_N.hdf5: task id from the folder, no manifest
    sel = tmp_path / "selected20"
    (sel / "task_004").mkdir(parents=True)
    shutil.copytree(extracted / "insert_usb_cable", sel / "task_004" / "insert_usb_cable")
    assert adapter.discover(sel) == ids[:2]
    assert adapter.read_unit(sel, "task_004_episode_0").unit["task_id"] == "task_004"


# ------------------------------------------------------------------------------------------------ odd cases


def assert_others_read(root, adapter=None, ids=("task_004_episode_0", "task_089_episode_0")):
    adapter = adapter or AistAdapter()
    for uid in ids:
        assert validate_unit(adapter.read_unit(root, uid)) is None
        assert decode_frame_index(adapter.read_frames(root, uid, "cam_high", [7])[7]) == 7


def test_truncated_hdf5_member(tmp_path):
    good = ep_bytes("task_004", 1)
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/episode_1.hdf5": good[: len(good) // 2],
            },
            "task_089": {"close_cardboard_box/episode_0.hdf5": ep_bytes("task_089", 0)},
        },
    )
    adapter = AistAdapter()
    assert "task_004_episode_1" in adapter.discover(root)
    for call in (
        lambda: adapter.read_unit(root, "task_004_episode_1"),
        lambda: adapter.read_frames(root, "task_004_episode_1", "cam_high", [0]),
    ):
        with pytest.raises(UnitError) as e:
            call()
        assert "insert_usb_cable/episode_1.hdf5" in e.value.reason and "HDF5" in e.value.reason
        assert e.value.file == "insert_usb_cable.zip/insert_usb_cable/episode_1.hdf5"
        assert str(tmp_path) not in e.value.reason
    assert_others_read(root)


def test_corrupt_deflated_member(tmp_path):
    root = small_root(tmp_path)
    path = root / "insert_usb_cable.zip"
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("insert_usb_cable/episode_1.hdf5")
    data = bytearray(path.read_bytes())
    mid = info.header_offset + 100 + info.compress_size // 2
    data[mid : mid + 64] = bytes(64)
    path.write_bytes(bytes(data))
    with pytest.raises(UnitError) as e:
        AistAdapter().read_unit(root, "task_004_episode_1")
    assert "episode_1.hdf5" in e.value.reason and "corrupt" in e.value.reason
    assert e.value.file == "insert_usb_cable.zip/insert_usb_cable/episode_1.hdf5"
    assert_others_read(root)


def test_truncated_hdf5_file_in_extracted_folder(tmp_path):
    root = small_root(tmp_path)
    (root / "close_cardboard_box.zip").unlink()
    (root / "close_cardboard_box").mkdir()
    data = ep_bytes("task_089", 0)
    (root / "close_cardboard_box" / "episode_0.hdf5").write_bytes(data[:5000])
    with pytest.raises(UnitError) as e:
        AistAdapter().read_unit(root, "task_089_episode_0")
    assert e.value.file == "close_cardboard_box/episode_0.hdf5" and "HDF5" in e.value.reason
    assert_others_read(root, ids=("task_004_episode_0", "task_004_episode_1"))


@pytest.mark.parametrize("how", ["not_a_zip", "truncated_zip", "empty_zip"])
def test_unreadable_task_zip_is_listed_and_refused(tmp_path, how):
    root = small_root(tmp_path)
    bad = root / "insert_rod_board.zip"  # task_016 in the manifest
    if how == "not_a_zip":
        bad.write_bytes(b"<html>Dropbox: this link has expired</html>")
    elif how == "truncated_zip":
        samples.write_task_zip(bad, {"insert_rod_board/episode_0.hdf5": ep_bytes("task_016", 0)})
        bad.write_bytes(bad.read_bytes()[:-200])
    else:
        samples.write_task_zip(bad, {"insert_rod_board/readme.txt": b"nothing"})
    adapter = AistAdapter()
    ids = adapter.discover(root)
    # a truncated zip still names its episodes in its local headers: each is a unit (and a quarantine row)
    lost = "task_016_episode_0" if how == "truncated_zip" else "task_016_unreadable"
    assert ids == ["task_004_episode_0", "task_004_episode_1", lost, "task_089_episode_0"]
    with pytest.raises(UnitError) as e:
        adapter.read_unit(root, lost)
    assert e.value.file == "insert_rod_board.zip"
    assert (
        ("not a readable zip" in e.value.reason)
        if how != "empty_zip"
        else ("no insert_rod_board/episode_N" in e.value.reason)
    )
    with pytest.raises(UnitError):
        adapter.read_unit(root, "task_016_episode_0")
    assert_others_read(root)


def test_missing_camera(tmp_path):
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/episode_1.hdf5": ep_bytes("task_004", 1, cameras=("cam_low",)),
            },
            "task_089": {"close_cardboard_box/episode_0.hdf5": ep_bytes("task_089", 0)},
        },
    )
    with pytest.raises(UnitError) as e:
        AistAdapter().read_unit(root, "task_004_episode_1")
    assert "observations/images/cam_high" in e.value.reason and "cam_low" in e.value.reason
    with pytest.raises(UnitError, match="cam_high"):
        AistAdapter().read_frames(root, "task_004_episode_1", "cam_high", [0])
    low = AistAdapter(camera="cam_low").read_unit(root, "task_004_episode_1")
    assert validate_unit(low) is None and low.unit["cameras"] == ["cam_low"]
    assert_others_read(root)


def test_row_count_mismatch(tmp_path):
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/episode_1.hdf5": ep_bytes("task_004", 1, extra_qpos_rows=3),
            },
            "task_089": {"close_cardboard_box/episode_0.hdf5": ep_bytes("task_089", 0, extra_qpos_rows=40)},
        },
    )
    adapter = AistAdapter()
    ir = adapter.read_unit(root, "task_004_episode_1")  # within tolerance: cut to the common prefix
    assert validate_unit(ir) is None
    assert ir.unit["num_frames"] == N and ir.signals.num_rows == 2 * N
    assert any("row counts differ" in n for n in ir.notes)
    with pytest.raises(UnitError) as e:  # beyond tolerance: alignment not trusted
        adapter.read_unit(root, "task_089_episode_0")
    assert "row counts disagree" in e.value.reason and str(N + 40) in e.value.reason
    assert validate_unit(AistAdapter(row_mismatch_tolerance=50).read_unit(root, "task_089_episode_0")) is None
    assert validate_unit(adapter.read_unit(root, "task_004_episode_0")) is None


def test_missing_frame_rate_defaults_to_50(tmp_path, demo):
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/episode_1.hdf5": ep_bytes("task_004", 1, frame_rate=None),
            }
        },
    )
    adapter = AistAdapter()
    ir = adapter.read_unit(root, "task_004_episode_1")
    assert ir.unit["fps"] == 50.0 and validate_unit(ir) is None
    assert "root attr 'frame_rate' is absent: assumed 50 fps (ProcessBench default)" in ir.notes
    assert not any("frame_rate" in n for n in adapter.read_unit(root, "task_004_episode_0").notes)
    # a 30 fps episode keeps its own clock; the demo corpus carries one realistic episode without the attr
    root30 = small_root(
        tmp_path / "r30", {"task_004": {"insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0, frame_rate=30)}}
    )
    ir30 = adapter.read_unit(root30, "task_004_episode_0")
    assert ir30.unit["fps"] == 30.0 and ir30.frames.column("t_sec").to_pylist()[3] == pytest.approx(0.1)
    assert adapter.read_unit(demo, "task_066_episode_2").notes[0].startswith("root attr 'frame_rate' is absent")


def test_bad_jpeg_row_and_out_of_range_index(tmp_path):
    path = tmp_path / "ep.hdf5"
    path.write_bytes(ep_bytes("task_004", 1))
    with h5py.File(path, "r+") as f:
        f["observations/images/cam_high"][9] = 0
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/episode_1.hdf5": path.read_bytes(),
            }
        },
    )
    adapter = AistAdapter()
    with pytest.raises(UnitError, match="frame 9 .* does not decode"):
        adapter.read_frames(root, "task_004_episode_1", "cam_high", [8, 9])
    with pytest.raises(UnitError, match="outside"):
        adapter.read_frames(root, "task_004_episode_0", "cam_high", [N])
    with pytest.raises(UnitError, match="cam_side"):
        adapter.read_frames(root, "task_004_episode_0", "cam_side", [0])
    assert adapter.read_frames(root, "task_004_episode_1", "cam_high", []) == {}


def _pil_pixels(data: bytes):
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size[0] * img.size[1]
    except Exception:  # noqa: BLE001 - any refusal: PIL gives no size
        return None


def test_jpeg_header_size_is_what_pil_reads():
    """The JPEG marker scan gives PIL's width x height on the layouts it reads (baseline, progressive, grey, CMYK
    with EXIF, a 30000 x 30000 declaration), and leaves any other bytes to PIL (image_pixels then is PIL's answer)."""
    import cv2
    from PIL import Image

    from upstream_adapters.aist.adapter import _jpeg_pixels, image_pixels

    img = (np.random.default_rng(0).random((37, 53, 3)) * 255).astype(np.uint8)
    plain = [
        cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, q, cv2.IMWRITE_JPEG_PROGRESSIVE, prog])[1].tobytes()
        for q in (10, 95)
        for prog in (0, 1)
    ]
    plain.append(cv2.imencode(".jpg", img[:, :, 0])[1].tobytes())
    for mode in ("RGB", "L", "CMYK"):
        buf = io.BytesIO()
        exif = Image.Exif()
        exif[0x010F] = "maker"
        Image.fromarray(img).convert(mode).save(buf, "JPEG", exif=exif, progressive=mode != "L")
        plain.append(buf.getvalue())
    huge = bytearray(plain[0])
    sof = huge.find(b"\xff\xc0")
    huge[sof + 5 : sof + 9] = (30000).to_bytes(2, "big") * 2
    for data in plain:
        assert _jpeg_pixels(data) == _pil_pixels(data) == image_pixels(data), data[:4]
    # past PIL's own bomb bound PIL refuses to open it (its error message names the size): read here
    assert _jpeg_pixels(bytes(huge)) == image_pixels(bytes(huge)) == 900_000_000
    assert _pil_pixels(bytes(huge)) is None
    # not read here: cut inside the header, junk or fill bytes between segments, an unknown marker, 12-bit samples,
    # not a JPEG at all; image_pixels then is what PIL says (a size or None)
    d = plain[0]
    sos = d.find(b"\xff\xda")
    twelve = bytearray(d)
    twelve[sof + 4] = 12
    others = [
        d[:sos],
        d[: sos + 5],
        d[:2] + b"\x00" + d[2:],
        d[:2] + b"\xff" + d[2:],
        d[:sos] + b"\xff\x43\x00\x04\x00\x00" + d[sos:],
        bytes(twelve),
        cv2.imencode(".png", img)[1].tobytes(),
        b"",
    ]
    for data in others:
        assert _jpeg_pixels(data) is None
        assert image_pixels(data) == _pil_pixels(data)
    assert image_pixels(d[:2] + b"\xff" + d[2:]) == 37 * 53  # PIL skips the fill byte


def test_root_errors(tmp_path):
    adapter = AistAdapter()
    with pytest.raises(SourceError, match="'nowhere' does not exist"):
        adapter.discover(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="'empty' is empty") as e:
        adapter.discover(tmp_path / "empty")
    assert str(tmp_path) not in str(e.value)
    only_manifest = tmp_path / "m"
    only_manifest.mkdir()
    samples.write_manifest(only_manifest)
    (only_manifest / "README.txt").write_text("hi")
    with pytest.raises(SourceError, match="no AIST task zips"):
        adapter.discover(only_manifest)
    bad_manifest = small_root(tmp_path / "bm")
    (bad_manifest / MANIFEST).write_text("id;name\n1;x\n")
    with pytest.raises(SourceError, match="task_id,task_name"):
        adapter.discover(bad_manifest)


def test_task_ids_from_the_task_table_manifest_option_and_unmapped_tasks(tmp_path):
    # the zips alone: task ids come from the shipped public task table (configs/aist_tasks.csv)
    root = small_root(tmp_path, manifest=False)
    alone = AistAdapter()
    assert alone.discover(root) == ["task_004_episode_0", "task_004_episode_1", "task_089_episode_0"]
    assert alone.read_unit(root, "task_089_episode_0").unit["taxonomy"]
    mapped = AistAdapter(task_ids={"insert_usb_cable": "task_004", "close_cardboard_box": "task_089"})
    assert mapped.discover(root) == ["task_004_episode_0", "task_004_episode_1", "task_089_episode_0"]
    assert mapped.read_unit(root, "task_089_episode_0").unit["task_id"] == "task_089"

    # with a manifest, a zip it does not list is kept visible as an unmapped unit that read_unit refuses
    root2 = small_root(tmp_path / "m")
    samples.write_task_zip(root2 / "fold_towel.zip", {"fold_towel/episode_0.hdf5": ep_bytes("task_004", 0)})
    adapter = AistAdapter()
    ids = adapter.discover(root2)
    assert ids == ["task_004_episode_0", "task_004_episode_1", "task_089_episode_0", "unmapped_fold_towel"]
    with pytest.raises(UnitError, match="'fold_towel' has no task id: it is not in the AIST task table") as e:
        adapter.read_unit(root2, "unmapped_fold_towel")
    assert e.value.file == "fold_towel.zip"
    assert AistAdapter(task_ids={"fold_towel": "task_200"}).discover(root2)[-1] == "task_200_episode_0"

    # two task names claiming one task id: both refused rather than mixed
    dup = AistAdapter(task_ids={"fold_towel": "task_089"})
    assert dup.discover(root2) == ["task_004_episode_0", "task_004_episode_1", "task_089_unreadable"]
    with pytest.raises(UnitError, match="claimed by several task names"):
        dup.read_unit(root2, "task_089_episode_0")

    # tasks option: unknown ids are a configuration error; a known task without data is quarantined
    with pytest.raises(SourceError, match="task_999"):
        AistAdapter(tasks=["task_999"]).discover(root2)
    sel = AistAdapter(tasks=["task_089", "task_048"])
    assert sel.discover(root2) == ["task_048_unreadable", "task_089_episode_0"]
    with pytest.raises(UnitError, match="no zip or folder"):
        sel.read_unit(root2, "task_048_unreadable")


# ids escaping the root: tests/test_adapter_contract.py; here the AIST-specific malformed ones
@pytest.mark.parametrize("uid", ["task_004_episode_7", "task_123_episode_0", "task_004_episode_x"])
def test_malformed_unit_ids_refused(tmp_path, uid):
    root = small_root(tmp_path)
    adapter = AistAdapter()
    with pytest.raises(UnitError):
        adapter.read_unit(root, uid)
    with pytest.raises(UnitError):
        adapter.read_frames(root, uid, "cam_high", [0])


def test_task_folders_and_files_linked_from_another_disk_are_read(tmp_path):
    root = small_root(tmp_path)
    outside = tmp_path / "outside"
    (outside / "insert_usb_cable").mkdir(parents=True)
    (outside / "insert_usb_cable" / "episode_0.hdf5").write_bytes(ep_bytes("task_004", 0))
    (outside / "episode_0.hdf5").write_bytes(ep_bytes("task_089", 0))
    # a task folder linked from elsewhere (it shadows insert_usb_cable.zip), an episode file linked from elsewhere
    (root / "insert_usb_cable").symlink_to(outside / "insert_usb_cable", target_is_directory=True)
    (root / "close_cardboard_box.zip").unlink()
    (root / "close_cardboard_box").mkdir()
    (root / "close_cardboard_box" / "episode_0.hdf5").symlink_to(outside / "episode_0.hdf5")
    (root / "close_cardboard_box" / "episode_1.hdf5").write_bytes(ep_bytes("task_089", 1))
    adapter = AistAdapter()
    ids = adapter.discover(root)
    assert ids == ["task_004_episode_0", "task_089_episode_0", "task_089_episode_1"]
    for uid in ids:
        assert validate_unit(adapter.read_unit(root, uid)) is None
    assert adapter.read_frames(root, "task_089_episode_0", "cam_high", [0])[0].shape[2] == 3


def test_symlink_members_inside_a_zip_are_refused(tmp_path):
    import stat
    import zipfile

    root = small_root(tmp_path)
    zpath = root / "insert_usb_cable.zip"
    with zipfile.ZipFile(zpath, "a") as zf:
        info = zipfile.ZipInfo("insert_usb_cable/episode_7.hdf5")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    adapter = AistAdapter()
    assert "task_004_episode_7" in adapter.discover(root)
    with pytest.raises(UnitError, match="symlink") as e:
        adapter.read_unit(root, "task_004_episode_7")
    assert e.value.file == "insert_usb_cable.zip"
    assert validate_unit(adapter.read_unit(root, "task_004_episode_0")) is None


def test_zip_slip_member_names_refused(tmp_path):
    root = small_root(
        tmp_path,
        {
            "task_004": {
                "insert_usb_cable/episode_0.hdf5": ep_bytes("task_004", 0),
                "insert_usb_cable/../insert_usb_cable/episode_1.hdf5": ep_bytes("task_004", 1),
                "/insert_usb_cable/episode_2.hdf5": ep_bytes("task_004", 2),
                "../../episode_3.hdf5": ep_bytes("task_004", 3),
                "insert_usb_cable\\..\\..\\episode_4.hdf5": ep_bytes("task_004", 4),
            }
        },
    )
    adapter = AistAdapter()
    assert adapter.discover(root) == [f"task_004_episode_{i}" for i in range(5)]
    assert validate_unit(adapter.read_unit(root, "task_004_episode_0")) is None
    for i in range(1, 5):
        with pytest.raises(UnitError, match="zip-slip") as e:
            adapter.read_unit(root, f"task_004_episode_{i}")
        assert e.value.file == "insert_usb_cable.zip"
        with pytest.raises(UnitError, match="zip-slip"):
            adapter.read_frames(root, f"task_004_episode_{i}", "cam_high", [0])


def _hand_written_episode(n: int, aloha_bgr: bool) -> bytes:
    """An ALOHA-style episode written directly with h5py/cv2 (not our generator): frame i is RGB (200, 10*i, 30)."""
    import cv2

    rows = []
    for i in range(n):
        rgb = np.zeros((24, 32, 3), np.uint8)
        rgb[:] = (200, 10 * i, 30)
        # ALOHA: cv2.imencode of an RGB array (cv2 takes it for BGR); otherwise a correct RGB JPEG
        ok, enc = cv2.imencode(".jpg", rgb if aloha_bgr else rgb[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
        rows.append(enc.tobytes())
    width = max(len(r) for r in rows) + 7
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.attrs["Task name"] = "close_cardboard_box"
        f.attrs["taxonomy"] = "Asynchronous Bimanual"
        f.attrs["frame_rate"] = 50
        f.create_dataset("observations/qpos", data=np.zeros((n, 14)))
        f.create_dataset("observations/qvel", data=np.zeros((n, 14)))
        f.create_dataset(
            "observations/images/cam_high",
            data=np.stack([np.frombuffer(r.ljust(width, b"\0"), np.uint8) for r in rows]),
        )
        f.create_dataset("text/prompt", data=b"Close the box.")
    return buf.getvalue()


def test_independent_zip_corpus_frame_order_and_colour_convention(tmp_path):
    import zipfile

    root = tmp_path / "aist"
    root.mkdir()
    good, aloha = _hand_written_episode(12, False), _hand_written_episode(12, True)
    with zipfile.ZipFile(root / "close_cardboard_box.zip", "w") as zf:  # no manifest: the zip alone
        zf.writestr("close_cardboard_box/episode_0.hdf5", good)
        zf.writestr("close_cardboard_box/episode_1.hdf5", aloha)
        zf.writestr("close_cardboard_box/episode_2.hdf5", good[: len(good) // 3])  # truncated download
    adapter = AistAdapter()
    assert adapter.discover(root) == [f"task_089_episode_{i}" for i in range(3)]
    ir = adapter.read_unit(root, "task_089_episode_0")
    assert validate_unit(ir) is None and ir.unit["num_frames"] == 12 and ir.unit["task_id"] == "task_089"
    assert any("JPEG colour order assumed 'rgb'" in n for n in ir.notes)
    with pytest.raises(UnitError, match="corrupt or truncated") as e:
        adapter.read_unit(root, "task_089_episode_2")
    assert e.value.file == "close_cardboard_box.zip/close_cardboard_box/episode_2.hdf5"
    want = [0, 5, 11]

    def close(img, rgb):
        return np.abs(img.reshape(-1, 3).mean(0) - np.array(rgb)).max() < 6

    frames = adapter.read_frames(root, "task_089_episode_0", "cam_high", want)
    assert all(close(frames[i], (200, 10 * i, 30)) for i in want)  # frame i is frame i, colours as encoded
    swapped = adapter.read_frames(root, "task_089_episode_1", "cam_high", want)
    assert all(close(swapped[i], (30, 10 * i, 200)) for i in want)  # ALOHA-encoded rows under the default
    bgr = AistAdapter(jpeg_channel_order="bgr").read_frames(root, "task_089_episode_1", "cam_high", want)
    assert all(close(bgr[i], (200, 10 * i, 30)) for i in want)
    with pytest.raises(ValueError, match="jpeg_channel_order"):
        AistAdapter(jpeg_channel_order="grb")
