"""REASSEMBLE adapter + sample generator: real layout, IR contract, odd cases (docs/upstream-formats.md, REASSEMBLE)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from upstream_adapters import get_adapter
from upstream_adapters.ir import SourceError, UnitError, validate_unit
from upstream_adapters.reassemble.adapter import ReassembleAdapter
from upstream_adapters.samples import reassemble as gen
from upstream_adapters.samples.common import decode_frame_index

NORMAL = "2025-01-09-13-57-17"
PER_AXIS = "2025-01-09-14-12-03"
HAND_LATE = "2025-01-10-15-28-50"
NO_HAND = "2025-01-10-16-17-40"
NO_LEADING = "2025-01-10-17-54-09"
WITH_FAILURE = "2025-01-11-14-43-37"
TRAIN = "2025-01-11-15-02-11"
ALL = sorted([NORMAL, PER_AXIS, HAND_LATE, NO_HAND, NO_LEADING, WITH_FAILURE, TRAIN])
READABLE = [u for u in ALL if u != NO_HAND]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reassemble")
    gen.write(out, scale="tiny", seed=0)
    return out


@pytest.fixture(scope="module")
def adapter() -> ReassembleAdapter:
    return get_adapter("reassemble", camera="hand")


@pytest.fixture(scope="module")
def irs(root, adapter):
    return {u: adapter.read_unit(root, u) for u in READABLE}


def _copy_root(src: Path, dst: Path, ids: list[str]) -> Path:
    (dst / "data").mkdir(parents=True)
    for u in ids:
        shutil.copy(src / "data" / f"{u}.h5", dst / "data" / f"{u}.h5")
    shutil.copytree(src / "splits", dst / "splits")
    return dst


def _cam_ts(root: Path, unit: str, cam: str = "hand") -> np.ndarray:
    with h5py.File(root / "data" / f"{unit}.h5", "r") as f:
        return np.asarray(f[f"timestamps/{cam}"][()], np.float64).reshape(-1)


# ------------------------------------------------------------------------------------------ layout of the samples
def test_sample_layout_matches_release(root):
    assert sorted(p.name for p in (root / "data").iterdir()) == [f"{u}.h5" for u in ALL]
    assert sorted(p.name for p in (root / "poses").iterdir()) == [f"{u}_poses.json" for u in ALL]
    test = (root / "splits" / "test_split1.txt").read_text().split("\n")
    assert test[-1] == "" and sorted(test[:-1]) == sorted(set(ALL) - {TRAIN})
    assert (root / "splits" / "train_split1.txt").read_text() == f"{TRAIN}\n"
    with h5py.File(root / "data" / f"{NORMAL}.h5", "r") as f:
        for cam in ("hama1", "hama2", "hand", "capture_node-camera-image"):
            assert f[cam].shape == () and f[cam].dtype.kind == "V"
            assert bytes(f[cam][()])[4:8] == b"ftyp"
            assert f[f"timestamps/{cam}"].dtype == np.float64
        for mic in ("hama1_audio", "hama2_audio", "hand_audio"):
            assert f[mic].dtype == np.int64 and f[mic].ndim == 1 and f[mic][()].max() <= 255
        assert f["events"].dtype == np.int64 and f["events"].shape[1] == 3
        rs = f["robot_state"]
        assert rs["measured_force"].shape[1] == 3 and rs["joint_positions"].shape[1] == 7
        assert rs["gripper_positions"].shape[1] == 2 and rs["pose"].shape[1] == 7 and rs["velocity"].shape[1] == 6
        rates = {
            k: len(f[f"timestamps/{k}"])
            for k in ("measured_force", "joint_positions", "pose", "compensated_base_force")
        }
        assert len(set(rates.values())) == 4  # distinct native rates
        g = f["segments_info/0"]
        assert g["text"][()] == b"No action." and g["success"][()].dtype == np.bool_
        assert int(g["index"][()]) == 0 and g["start"].dtype == np.float64
        g1 = f["segments_info/1"]
        assert g1["text"][()].decode().endswith(".") and g1["low_level/0/text"][()] == b"Approach"
    with h5py.File(root / "data" / f"{PER_AXIS}.h5", "r") as f:
        assert "pose_qw" in f["robot_state"] and "pos_joint9" in f["robot_state"] and "pose" not in f["robot_state"]
        assert f["timestamps/hand"].ndim == 2 and f["timestamps/hand"].shape[1] == 1
    with h5py.File(root / "data" / f"{NO_HAND}.h5", "r") as f:
        assert "hand" not in f and "hama1" in f


def test_sample_vocabulary_and_failures(root, irs):
    highs, lows, failed = set(), set(), 0
    for ir in irs.values():
        for s in ir.segments.to_pylist():
            (highs if s["level"] == "high" else lows).add(s["text"])
            failed += s["level"] == "high" and s["success"] is False
    assert lows <= set(gen.LOW_VOCAB) and {"Approach", "Grasp", "Lift", "Release"} <= lows
    verbs = {t.split()[0] for t in highs if t != "No action."}
    assert "No action." in highs and verbs <= {"Pick", "Insert", "Remove", "Place"}
    assert all(t == "No action." or t.rstrip(".").split(" ", 1)[1] in gen.OBJECTS for t in highs)
    assert failed >= 1


def test_generator_is_deterministic(tmp_path):
    spec = gen.RecSpec(NORMAL)
    gen.write_recording(tmp_path / "a.h5", spec, "tiny", seed=3)
    gen.write_recording(tmp_path / "b.h5", spec, "tiny", seed=3)
    gen.write_recording(tmp_path / "c.h5", spec, "tiny", seed=4)
    digest = [hashlib.sha256((tmp_path / f"{n}.h5").read_bytes()).hexdigest() for n in "abc"]
    assert digest[0] == digest[1] and digest[0] != digest[2]


def test_release_plan_is_realistic_and_fits_the_barcode():
    """Release recordings (plans only, no video): ~30-36 actions each like the real ~30.5 per recording, ~4-5 min
    long, hand-camera frame counts within the frame-index barcode, recording ids at least 6 min apart."""
    from upstream_adapters.samples.common import INDEX_BITS, rng_for

    for seed in (0, 7):
        specs = gen.specs_for("release", seed)
        assert len(specs) == 41 and sum("test_split1" in s.splits for s in specs) == 37
        starts = sorted(gen._unix_t0(s.rec_id) for s in specs)
        assert min(np.diff(starts)) >= 360
        n_actions = []
        for spec in specs:
            segs = gen.plan_recording(
                rng_for(seed, gen.SLUG, spec.rec_id), "release", spec.leading_no_action, spec.force_failure
            )
            actions = [s for s in segs if s.text != gen.NO_ACTION]
            n_actions.append(len(actions))
            assert 30 <= len(actions) <= 37 and all(s.low for s in actions), spec.rec_id
            frames = (segs[-1].end + 0.25) * 30
            assert 6000 <= frames < (1 << INDEX_BITS), (spec.rec_id, frames)
        assert 31 <= np.mean(n_actions) <= 35


# ------------------------------------------------------------------------------------------ discovery
def test_discover_sorted_and_split_filter(root):
    assert ReassembleAdapter().discover(root) == ALL
    assert ReassembleAdapter(only_split="test_split1").discover(root) == sorted(set(ALL) - {TRAIN})
    assert ReassembleAdapter(only_split="train_split1").discover(root) == [TRAIN]


def test_split_listing_a_missing_recording_is_quarantined_not_dropped(root, tmp_path):
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    ad = ReassembleAdapter(only_split="test_split1")
    ids = ad.discover(r)
    assert NORMAL in ids and PER_AXIS in ids  # listed, though only NORMAL is on disk
    assert validate_unit(ad.read_unit(r, NORMAL)) is None
    with pytest.raises(UnitError, match="missing") as exc:
        ad.read_unit(r, PER_AXIS)
    assert exc.value.file == f"data/{PER_AXIS}.h5"


@pytest.mark.parametrize("case", ["missing", "empty", "no_data_dir", "empty_data_dir", "not_a_dir", "no_split_file"])
def test_unusable_root_is_a_source_error(tmp_path, case):
    r = tmp_path / "reassemble_root"
    ad = ReassembleAdapter()
    if case == "empty":
        r.mkdir()
    elif case == "no_data_dir":
        (r / "poses").mkdir(parents=True)
        (r / "splits").mkdir()
        (r / "splits" / "test_split1.txt").write_text(f"{NORMAL}\n")
    elif case == "empty_data_dir":
        (r / "data").mkdir(parents=True)
    elif case == "not_a_dir":
        r.write_text("x")
    elif case == "no_split_file":
        (r / "data").mkdir(parents=True)
        (r / "data" / f"{NORMAL}.h5").write_bytes(b"")
        ad = ReassembleAdapter(only_split="test_split1")
    with pytest.raises(SourceError) as exc:
        ad.discover(r)
    msg = str(exc.value)
    assert "reassemble_root" in msg and str(tmp_path) not in msg


# ------------------------------------------------------------------------------------------ IR contract
def test_units_validate_and_units_row(root, irs):
    for u, ir in irs.items():
        assert validate_unit(ir) is None, u
        row = ir.unit
        assert row["source"] == "reassemble" and row["unit_id"] == u and row["task_id"] == u
        assert row["unit_type"] == "recording" and row["arm_layout"] == "single_arm"
        assert row["licence"] == "CC BY 4.0" and row["language"] is None and row["rating"] is None
        assert row["cameras"] == ["capture_node-camera-image", "hama1", "hama2", "hand"] and row["camera"] == "hand"
        assert row["fps"] == pytest.approx(30.0)
        assert row["num_frames"] == len(_cam_ts(root, u))
        assert row["official_split"] == ("train_split1" if u == TRAIN else "test_split1")


def test_clock_is_normalised(root, irs):
    for u, ir in irs.items():
        fr = ir.frames.to_pydict()
        ts = _cam_ts(root, u)
        assert fr["frame_index"] == list(range(len(ts))) and set(fr["camera"]) == {"hand"}
        assert np.array_equal(fr["native_ts"], ts)
        assert fr["t_sec"][0] == 0.0
        assert np.allclose(fr["t_sec"], ts - ts[0]) and ts[0] > 1.7e9  # Unix seconds in, seconds-from-0 out
        assert fr["t_sec"][-1] == pytest.approx((len(ts) - 1) / 30.0, rel=0.01)


def test_signals_on_primary_frames_by_nearest_timestamp(root, irs):
    ir = irs[NORMAL]
    sig = ir.signals.to_pydict()
    n = ir.unit["num_frames"]
    assert sig["frame_index"] == list(range(n)) and set(sig["arm"]) == {"single"}
    assert sig["t_sec"] == ir.frames.column("t_sec").to_pylist()
    assert all(v is None for v in sig["gripper_effort"])
    cam = _cam_ts(root, NORMAL)
    with h5py.File(root / "data" / f"{NORMAL}.h5", "r") as f:
        pose, pose_t = f["robot_state/pose"][()], f["timestamps/pose"][()]
        vel, vel_t = f["robot_state/velocity"][()], f["timestamps/velocity"][()]
        grip, grip_t = f["robot_state/gripper_positions"][()], f["timestamps/gripper_positions"][()]
        frc, frc_t = f["robot_state/measured_force"][()], f["timestamps/measured_force"][()]
    for i in (0, 7, n // 2, n - 1):
        k = int(np.argmin(np.abs(pose_t - cam[i])))
        assert sig["pos_x"][i] == pose[k, 0] and sig["pos_y"][i] == pose[k, 1] and sig["pos_z"][i] == pose[k, 2]
        k = int(np.argmin(np.abs(vel_t - cam[i])))
        assert sig["speed"][i] == pytest.approx(float(np.linalg.norm(vel[k, :3])))
        k = int(np.argmin(np.abs(grip_t - cam[i])))
        assert sig["gripper_width"][i] == pytest.approx(float(grip[k].sum()))
        k = int(np.argmin(np.abs(frc_t - cam[i])))
        assert sig["force"][i] == pytest.approx(float(np.linalg.norm(frc[k])))


def test_signals_follow_the_labels(irs):
    by = {}
    for ir in irs.values():
        sig = ir.signals.to_pydict()
        for s in ir.segments.to_pylist():
            if s["level"] == "high" and s["text"] != "No action.":
                continue
            rng = range(s["start_frame"], s["end_frame"] + 1)
            for ch in ("speed", "force", "gripper_width"):
                by.setdefault((s["text"], ch), []).extend(sig[ch][i] for i in rng)
    mean = {k: float(np.mean(v)) for k, v in by.items()}
    assert mean[("No action.", "speed")] < 0.005 < 0.05 < mean[("Approach", "speed")]
    assert mean[("Push", "force")] > 3 * mean[("No action.", "force")] + 3
    assert max(by[("Grasp", "gripper_width")]) > 0.07 > 0.035 > min(by[("Grasp", "gripper_width")])
    assert max(by[("Lift", "gripper_width")]) < 0.05  # carrying with a closed gripper


def test_segments_map_to_camera_frames(root, irs):
    for u, ir in irs.items():
        segs = ir.segments.to_pylist()
        cam = _cam_ts(root, u)
        highs = {s["seg_index"]: s for s in segs if s["level"] == "high"}
        with h5py.File(root / "data" / f"{u}.h5", "r") as f:
            for s in segs:
                g = (
                    f[f"segments_info/{s['seg_index']}"]
                    if s["level"] == "high"
                    else f[f"segments_info/{s['parent_index']}/low_level/{s['seg_index']}"]
                )
                start, end = float(g["start"][()]), float(g["end"][()])
                assert s["text"] == g["text"][()].decode() and s["success"] == bool(g["success"][()])
                assert s["start_sec"] == pytest.approx(start - cam[0]) and s["end_sec"] == pytest.approx(end - cam[0])
                lo = max(0, int(np.searchsorted(cam, start, "left")))
                hi = min(len(cam) - 1, int(np.searchsorted(cam, end, "right")) - 1)
                assert (s["start_frame"], s["end_frame"]) == (lo, hi)
                if s["level"] == "low":
                    assert s["parent_index"] in highs
                    assert highs[s["parent_index"]]["start_frame"] <= s["start_frame"]
                else:
                    assert s["parent_index"] is None
    fails = [s for s in irs[WITH_FAILURE].segments.to_pylist() if s["success"] is False]
    assert any(s["level"] == "high" for s in fails) and any(s["level"] == "low" for s in fails)


# ------------------------------------------------------------------------------------------ frames
def test_frames_decode_as_their_index(root, adapter, irs):
    for u in (NORMAL, HAND_LATE, PER_AXIS):
        n = irs[u].unit["num_frames"]
        want = [n - 1, 0, 17, 3, 17, n // 2]
        got = adapter.read_frames(root, u, "hand", want)
        assert sorted(got) == sorted(set(want))
        for i, img in got.items():
            assert img.dtype == np.uint8 and img.shape == (48, 64, 3)
            assert decode_frame_index(img) == i
    other = adapter.read_frames(root, NORMAL, "hama1", [0, 5])
    assert {i: decode_frame_index(v) for i, v in other.items()} == {0: 0, 5: 5}
    assert adapter.read_frames(root, NORMAL, "hand", []) == {}


def test_read_frames_errors(root, adapter, irs):
    n = irs[NORMAL].unit["num_frames"]
    with pytest.raises(UnitError, match="not in video"):
        adapter.read_frames(root, NORMAL, "hand", [0, n + 5])
    with pytest.raises(UnitError, match="camera 'nope' missing"):
        adapter.read_frames(root, NORMAL, "nope", [0])
    with pytest.raises(UnitError, match="camera 'hand' missing"):
        adapter.read_frames(root, NO_HAND, "hand", [0])


# ------------------------------------------------------------------------------------------ odd cases
def test_recording_without_hand_fails_others_read(root, adapter, irs):
    with pytest.raises(UnitError, match="camera 'hand' missing") as exc:
        adapter.read_unit(root, NO_HAND)
    assert exc.value.file == f"data/{NO_HAND}.h5"
    assert set(irs) == set(ALL) - {NO_HAND}
    # the same recording reads on another camera
    ir = ReassembleAdapter(camera="hama1").read_unit(root, NO_HAND)
    assert validate_unit(ir) is None and ir.unit["camera"] == "hama1" and "hand" not in ir.unit["cameras"]


def test_hand_camera_starting_late(root, irs):
    ir = irs[HAND_LATE]
    cam = _cam_ts(root, HAND_LATE)
    with h5py.File(root / "data" / f"{HAND_LATE}.h5", "r") as f:
        first_seg_end = float(f["segments_info/0/end"][()])
        assert f["segments_info/0/text"][()] == b"No action."
        assert cam[0] > f["timestamps/pose"][0] + 1.0
    assert cam[0] > first_seg_end  # the leading "No action." ended before the camera started
    segs = ir.segments.to_pylist()
    highs = [s for s in segs if s["level"] == "high"]
    assert highs[0]["seg_index"] == 1 and highs[0]["text"] != "No action."  # group 0 dropped
    assert highs[0]["start_sec"] < 0 and highs[0]["start_frame"] == 0  # group 1 clipped
    assert not any(s["level"] == "low" and s["parent_index"] == 1 and s["seg_index"] == 0 for s in segs)
    assert ir.frames.column("t_sec")[0].as_py() == 0.0
    assert ir.signals.column("pos_x").null_count == 0


def test_recording_without_leading_no_action(irs):
    highs = [s for s in irs[NO_LEADING].segments.to_pylist() if s["level"] == "high"]
    assert highs[0]["seg_index"] == 0 and highs[0]["text"] != "No action." and highs[1]["text"] == "No action."
    assert validate_unit(irs[NO_LEADING]) is None


def test_per_axis_robot_state_reads_like_merged(tmp_path, adapter):
    r = tmp_path / "r"
    gen.write_recording(r / "data" / f"{NORMAL}.h5", gen.RecSpec(NORMAL), "tiny", seed=5)
    merged = adapter.read_unit(r, NORMAL)
    gen.write_recording(r / "data" / f"{NORMAL}.h5", gen.RecSpec(NORMAL, per_axis=True, ts_2d=True), "tiny", seed=5)
    with h5py.File(r / "data" / f"{NORMAL}.h5", "r") as f:
        assert "measured_force_x" in f["robot_state"] and "measured_force" not in f["robot_state"]
    per_axis = adapter.read_unit(r, NORMAL)
    assert per_axis.signals.equals(merged.signals) and per_axis.frames.equals(merged.frames)
    assert per_axis.segments.equals(merged.segments) and per_axis.unit == merged.unit
    assert per_axis.signals.column("force").null_count == 0


def test_capitalised_low_level_group_is_accepted(root, tmp_path, adapter, irs):
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    with h5py.File(r / "data" / f"{NORMAL}.h5", "r+") as f:
        for g in f["segments_info"].values():
            if "low_level" in g:
                g.move("low_level", "Low_level")
    assert adapter.read_unit(r, NORMAL).segments.equals(irs[NORMAL].segments)


def test_segment_fields_in_other_forms_read_alike(root, tmp_path, adapter, irs):
    """Segment texts stored as a byte array, a variable-length string or behind a soft link read like the plain
    fixed-length strings: the fast low-level scalar read (reassemble_segments.py) takes only scalar
    dataspaces and leaves the rest to h5py (a byte array read as a scalar fails the unit)."""
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    with h5py.File(r / "data" / f"{NORMAL}.h5", "r+") as f:
        groups = [g for _, g in f["segments_info"].items()]
        groups += [lg for g in list(groups) if "low_level" in g for _, lg in g["low_level"].items()]
        for k, g in enumerate(groups):
            text = g["text"][()]
            del g["text"]
            if k % 3 == 0:
                g.create_dataset("text", data=np.frombuffer(text, np.uint8))
            elif k % 3 == 1:
                g.create_dataset("text", data=text.decode(), dtype=h5py.string_dtype())
            else:
                g.create_dataset("text_stored", data=text)
                g["text"] = h5py.SoftLink(f"{g.name}/text_stored")
        assert f["segments_info/0/text"].shape == (len(b"No action."),)
    assert adapter.read_unit(r, NORMAL).segments.equals(irs[NORMAL].segments)


def test_segment_index_mismatch_fails(root, tmp_path, adapter):
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    with h5py.File(r / "data" / f"{NORMAL}.h5", "r+") as f:
        del f["segments_info/2/index"]
        f["segments_info/2"].create_dataset("index", data=np.int64(7))
    with pytest.raises(UnitError, match="segments_info/2/index is 7"):
        adapter.read_unit(r, NORMAL)


def test_truncated_h5_fails_others_read(root, tmp_path, adapter):
    r = _copy_root(root, tmp_path / "r", [NORMAL, NO_LEADING])
    gen.truncate_file(r / "data" / f"{NORMAL}.h5")
    with pytest.raises(UnitError, match="cannot open HDF5 file") as exc:
        adapter.read_unit(r, NORMAL)
    assert exc.value.file == f"data/{NORMAL}.h5" and str(tmp_path) not in exc.value.reason
    with pytest.raises(UnitError):
        adapter.read_frames(r, NORMAL, "hand", [0])
    assert validate_unit(adapter.read_unit(r, NO_LEADING)) is None


def test_not_an_hdf5_file_fails(root, tmp_path, adapter):
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    (r / "data" / f"{NORMAL}.h5").write_bytes(b"PK\x03\x04 not hdf5")
    with pytest.raises(UnitError, match="cannot open HDF5 file"):
        adapter.read_unit(r, NORMAL)


@pytest.mark.parametrize("mode", ["garbage", "truncated"])
def test_corrupt_mp4_blob_fails_in_read_unit_and_read_frames(root, tmp_path, adapter, mode):
    r = _copy_root(root, tmp_path / "r", [NORMAL, NO_LEADING])
    gen.corrupt_blob(r / "data" / f"{NORMAL}.h5", "hand", mode)
    with pytest.raises(UnitError, match="camera 'hand' MP4 blob unreadable"):
        adapter.read_unit(r, NORMAL)
    with pytest.raises(UnitError, match="camera 'hand'"):
        adapter.read_frames(r, NORMAL, "hand", [0, 1])
    assert adapter.read_frames(r, NORMAL, "hama1", [2])[2].shape[2] == 3  # other cameras unaffected
    assert validate_unit(adapter.read_unit(r, NO_LEADING)) is None


def test_recording_linked_from_another_disk_is_read(root, tmp_path, adapter):
    outside = tmp_path / "outside.h5"
    shutil.copy(root / "data" / f"{NORMAL}.h5", outside)
    r = _copy_root(root, tmp_path / "r", [NO_LEADING])
    os.symlink(outside, r / "data" / f"{NORMAL}.h5")
    assert NORMAL in ReassembleAdapter().discover(r)
    assert validate_unit(ReassembleAdapter().read_unit(r, NORMAL)) is None


def test_stream_ending_early_gives_nulls_not_extrapolation(root, tmp_path, adapter, irs):
    """Real 2025-01-13-11-18-57: no pose for the last action. Frames past the stream's end get null positions."""
    r = _copy_root(root, tmp_path / "r", [NORMAL])
    with h5py.File(r / "data" / f"{NORMAL}.h5", "r+") as f:
        for key in ("robot_state/pose", "timestamps/pose"):
            data = f[key][()]
            del f[key]
            f.create_dataset(key, data=data[: len(data) // 2])
        pose_end = float(f["timestamps/pose"][-1])
    ir = adapter.read_unit(r, NORMAL)
    assert validate_unit(ir) is None
    cam = _cam_ts(root, NORMAL)
    pos_x = ir.signals.column("pos_x").to_pylist()
    late = cam > pose_end + adapter.max_signal_gap_s
    assert late.any() and all(pos_x[i] is None for i in np.flatnonzero(late))
    assert all(pos_x[i] is not None for i in np.flatnonzero(cam <= pose_end))
    assert ir.signals.column("speed").equals(irs[NORMAL].signals.column("speed"))


def _mp4_by_hand(n: int, fps: int = 30) -> bytes:
    """An H.264 MP4 written with PyAV directly (not our generator): frame i is a flat grey of level 8 * i."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = 32, 24, "yuv420p"
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(np.full((24, 32, 3), 8 * i, np.uint8), format="rgb24")
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return buf.getvalue()


def _recording_by_hand(path, n: int = 20, t0: float = 1736500000.0) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("hand", data=np.void(_mp4_by_hand(n)))
        ts = t0 + np.arange(n) / 30.0
        f.create_dataset("timestamps/hand", data=ts)
        f.create_dataset("timestamps/pose", data=ts)
        f.create_dataset("robot_state/pose", data=np.tile([0.1, 0.2, 0.3, 1, 0, 0, 0], (n, 1)).astype(float))
        g = f.create_group("segments_info/0")
        g["start"], g["end"], g["success"], g["text"], g["index"] = ts[2], ts[15], True, b"Pick gear.", 0
        lg = g.create_group("low_level/0")
        lg["start"], lg["end"], lg["success"], lg["text"] = ts[2], ts[6], True, b"Grasp"


def test_flat_folder_of_h5_files_reads_like_the_release_layout(tmp_path):
    gen.write(tmp_path / "release", scale="tiny", seed=0)
    gen.write(tmp_path / "flat", scale="tiny", seed=0, layout="flat")
    assert not (tmp_path / "flat" / "data").exists()
    a = ReassembleAdapter()
    ids = a.discover(tmp_path / "release")
    assert a.discover(tmp_path / "flat") == ids
    for uid in ids[:3]:
        try:
            x = a.read_unit(tmp_path / "release", uid)
        except UnitError as exc:
            with pytest.raises(UnitError) as e:
                a.read_unit(tmp_path / "flat", uid)
            assert e.value.reason == exc.reason and e.value.file == f"{uid}.h5"
            continue
        y = a.read_unit(tmp_path / "flat", uid)
        assert y.frames.equals(x.frames) and y.segments.equals(x.segments)
        assert {k: v for k, v in y.unit.items() if k != "official_split"} == {
            k: v for k, v in x.unit.items() if k != "official_split"
        }


def test_independent_flat_corpus_good_broken_and_frame_order(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    _recording_by_hand(root / "2025-01-09-10-00-00.h5")
    _recording_by_hand(root / "2025-01-09-11-00-00.h5")
    data = (root / "2025-01-09-11-00-00.h5").read_bytes()
    (root / "2025-01-09-12-00-00.h5").write_bytes(data[: len(data) // 2])  # truncated download
    a = ReassembleAdapter()
    assert a.discover(root) == ["2025-01-09-10-00-00", "2025-01-09-11-00-00", "2025-01-09-12-00-00"]
    ir = a.read_unit(root, "2025-01-09-10-00-00")
    assert validate_unit(ir) is None and ir.unit["num_frames"] == 20
    assert ir.segments.num_rows == 2
    with pytest.raises(UnitError) as e:
        a.read_unit(root, "2025-01-09-12-00-00")
    assert e.value.file == "2025-01-09-12-00-00.h5"
    got = a.read_frames(root, "2025-01-09-11-00-00", "hand", [0, 7, 19])
    for i, img in got.items():
        assert abs(float(img.mean()) - 8 * i) < 4, i  # frame i is frame i
