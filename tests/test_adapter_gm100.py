"""GM-100 adapter + sample generator: layout, IR contract, clocks, signals, frames and every odd case."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from upstream_adapters import get_adapter
from upstream_adapters.gm100.adapter import Gm100Adapter
from upstream_adapters.ir import SourceError, UnitError, validate_unit
from upstream_adapters.samples import gm100 as samples
from upstream_adapters.samples.common import decode_frame_index

TINY_IDS = [
    "task_00001__episode_000000",
    "task_00001__episode_000001",  # camera_top is AV1
    "task_00002__episode_000000",
    "task_00002__episode_000001",  # camera_top one frame shorter than the parquet
]
AV1 = TINY_IDS[1]
SHORT = TINY_IDS[3]
GOOD = TINY_IDS[:3]
TOP = "videos/chunk-000/observation.images.camera_top"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gm100") / "gm100-cobotmagic-lerobot"
    samples.write(root, scale="tiny", seed=0)
    return root


@pytest.fixture
def corpus(tiny, tmp_path) -> Path:
    """A private copy of the tiny corpus that a test may break."""
    dst = tmp_path / "gm100-cobotmagic-lerobot"
    shutil.copytree(tiny, dst, symlinks=True)
    return dst


@pytest.fixture
def adapter() -> Gm100Adapter:
    return Gm100Adapter(camera="camera_top")


def parquet(root: Path, unit_id: str) -> pa.Table:
    return pq.read_table(samples.unit_paths(root, unit_id)[0])


def vec(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    return col.flatten().to_numpy().reshape(len(col), -1).astype(np.float64)


def assert_others_read(adapter, root, ids):
    for u in ids:
        assert validate_unit(adapter.read_unit(root, u)) is None, u


# ---------------------------------------------------------------------------- layout and discovery


def test_registry_builds_the_adapter():
    a = get_adapter("gm100", camera="camera_top")
    assert isinstance(a, Gm100Adapter)
    assert (a.slug, a.name, a.unit_type, a.camera) == ("gm100", "GM-100", "episode", "camera_top")
    with pytest.raises(ValueError):
        Gm100Adapter(frame_count_tolerance=-1)


def test_sample_layout_is_lerobot_v21(tiny):
    assert sorted(p.name for p in tiny.iterdir()) == [
        ".gitattributes",
        ".processbench_sample",
        "README.md",
        "task_00001",
        "task_00002",
    ]
    info = json.loads((tiny / "task_00001/meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 15 and info["chunks_size"] == 1000
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    assert info["video_path"] == "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    videos = sorted(k for k, f in info["features"].items() if f["dtype"] == "video")
    assert videos == [f"observation.images.{c}" for c in ("camera_top", "camera_wrist_left", "camera_wrist_right")]
    assert (tiny / "task_00001/meta/tasks.jsonl").is_file()
    assert not (tiny / "task_00002/meta/tasks.jsonl").exists()  # the real download's odd case
    eps = [json.loads(x) for x in (tiny / "task_00002/meta/episodes.jsonl").read_text().splitlines()]
    t = parquet(tiny, TINY_IDS[0])
    schema = t.schema
    for name, width, _ in samples.SIGNAL_FEATURES:
        assert schema.field(name).type == pa.list_(pa.float32(), width), name  # fixed-length list<float32>
    assert schema.field("timestamp").type == pa.float32()
    for name in ("frame_index", "episode_index", "index", "task_index"):
        assert schema.field(name).type == pa.int64()
    assert b"huggingface" in schema.metadata
    for e in eps:
        assert parquet(tiny, f"task_00002__episode_{e['episode_index']:06d}").num_rows == e["length"]


def test_discover_is_sorted_and_ignores_non_task_entries(tiny, adapter):
    ids = adapter.discover(tiny)
    assert ids == TINY_IDS
    assert adapter.discover(tiny) == ids


def test_discover_unions_episodes_jsonl_and_parquet_files(corpus, adapter):
    meta = corpus / "task_00001/meta/episodes.jsonl"
    meta.write_text(meta.read_text().splitlines()[0] + "\n")  # lists episode 0 only
    assert adapter.discover(corpus) == TINY_IDS  # episode 1 is still found through data_path


# ---------------------------------------------------------------------------- the IR


def test_units_pass_the_ir_contract(tiny, adapter):
    for u in GOOD:
        ir = adapter.read_unit(tiny, u)
        assert validate_unit(ir) is None, u
        row = ir.unit
        task = u.split("__")[0]
        assert row["source"] == "gm100" and row["unit_id"] == u and row["task_id"] == task
        assert row["unit_type"] == "episode" and row["arm_layout"] == "bimanual"
        assert row["camera"] == "camera_top"
        assert row["cameras"] == ["camera_top", "camera_wrist_left", "camera_wrist_right"]
        assert row["fps"] == (15.0 if task == "task_00001" else 30.0)  # read from info.json
        assert row["num_frames"] == parquet(tiny, u).num_rows
        assert row["licence"] == "unknown"
        assert row["operator_id"] is None and row["scene_id"] is None and row["rating"] is None
        assert ir.segments.num_rows == 0


def test_language_from_tasks_jsonl(tiny, adapter):
    text = json.loads((tiny / "task_00001/meta/tasks.jsonl").read_text())["task"]
    assert adapter.read_unit(tiny, TINY_IDS[0]).unit["language"] == text


def test_missing_tasks_jsonl_gives_null_language(tiny, adapter):
    ir = adapter.read_unit(tiny, TINY_IDS[2])
    assert validate_unit(ir) is None
    assert ir.unit["language"] is None
    assert any("tasks.jsonl" in n for n in ir.notes)


def test_clocks_are_normalised(tiny, adapter):
    for u in GOOD:
        ir = adapter.read_unit(tiny, u)
        fr = ir.frames.to_pydict()
        ts = parquet(tiny, u).column("timestamp").to_numpy().astype(np.float64)
        n = ir.unit["num_frames"]
        assert fr["frame_index"] == list(range(n))
        assert set(fr["camera"]) == {"camera_top"}
        assert np.array_equal(fr["native_ts"], ts)
        assert fr["t_sec"][0] == 0.0
        assert np.allclose(fr["t_sec"], ts - ts[0])
        assert np.allclose(fr["t_sec"], np.arange(n) / ir.unit["fps"], atol=1e-5)


def test_signals_are_long_form_on_primary_frames(tiny, adapter):
    for u in GOOD:
        ir = adapter.read_unit(tiny, u)
        t = parquet(tiny, u)
        pos, vel, eff, grip = (
            vec(t, c)
            for c in (
                "observation.state.arm.position",
                "observation.state.arm.velocity",
                "observation.state.effector.effort",
                "observation.state.effector.position",
            )
        )
        n = ir.unit["num_frames"]
        sig = ir.signals.to_pydict()
        assert len(sig["arm"]) == 2 * n and set(sig["arm"]) == {"left", "right"}
        assert ir.signals.column("gripper_width").null_count == 0  # effector.position: the opening, metres
        assert ir.signals.column("force").null_count == 2 * n
        frames_t = ir.frames.column("t_sec").to_numpy()
        for arm, off, e in (("left", 0, 0), ("right", 6, 1)):
            m = np.array(sig["arm"]) == arm
            assert np.array(sig["frame_index"])[m].tolist() == list(range(n))
            assert np.allclose(np.array(sig["t_sec"])[m], frames_t)
            got = np.stack([np.array(sig[c])[m] for c in ("pos_x", "pos_y", "pos_z")], axis=1)
            assert np.allclose(got, pos[:, off : off + 3])
            assert np.allclose(np.array(sig["speed"])[m], np.linalg.norm(vel[:, off : off + 3], axis=1))
            assert np.allclose(np.array(sig["speed_full"])[m], np.linalg.norm(vel[:, off : off + 6], axis=1))
            assert np.allclose(np.array(sig["gripper_effort"])[m], eff[:, e])
            assert np.allclose(np.array(sig["gripper_width"])[m], grip[:, e])


def test_missing_signal_column_is_null_not_invented(corpus, adapter):
    path = samples.unit_paths(corpus, TINY_IDS[0])[0]
    t = pq.read_table(path)
    pq.write_table(t.drop_columns(["observation.state.effector.effort"]), path)
    ir = adapter.read_unit(corpus, TINY_IDS[0])
    assert validate_unit(ir) is None
    assert ir.signals.column("gripper_effort").null_count == ir.signals.num_rows
    assert ir.signals.column("pos_x").null_count == 0


def test_frames_decode_as_their_index(tiny, adapter):
    for u in (TINY_IDS[0], AV1, TINY_IDS[2]):  # H.264 with B-frames, AV1 (decord cannot open it), 30 fps task
        n = adapter.read_unit(tiny, u).unit["num_frames"]
        for cam in ("camera_top", "camera_wrist_left", "camera_wrist_right"):
            want = [n - 1, 0, 7, 7, n // 2, 33]
            got = adapter.read_frames(tiny, u, cam, want)
            assert sorted(got) == sorted(set(want))
            for i, img in got.items():
                assert img.dtype == np.uint8 and img.shape == (72, 96, 3)
                assert decode_frame_index(img) == i, (u, cam, i)


def test_read_frames_refuses_bad_requests(tiny, adapter):
    n = adapter.read_unit(tiny, TINY_IDS[0]).unit["num_frames"]
    with pytest.raises(UnitError):
        adapter.read_frames(tiny, TINY_IDS[0], "camera_top", [0, n])
    with pytest.raises(UnitError, match="negative"):
        adapter.read_frames(tiny, TINY_IDS[0], "camera_top", [-1])
    with pytest.raises(UnitError, match="not a video feature"):
        adapter.read_frames(tiny, TINY_IDS[0], "camera_front", [0])
    assert adapter.read_frames(tiny, TINY_IDS[0], "camera_top", []) == {}


def test_licence_from_a_dataset_card(corpus, adapter):
    (corpus / "README.md").write_text("---\nlicense: cc-by-4.0\ntags:\n- LeRobot\n---\n# card\n")
    assert adapter.read_unit(corpus, TINY_IDS[0]).unit["licence"] == "CC BY 4.0"
    (corpus / "task_00002" / "README.md").write_text("---\nlicense: cc-by-nc-4.0\n---\n")
    assert adapter.read_unit(corpus, TINY_IDS[2]).unit["licence"] == "CC BY-NC 4.0"
    assert adapter.read_unit(corpus, TINY_IDS[0]).unit["licence"] == "CC BY 4.0"
    (corpus / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    assert Gm100Adapter().read_unit(corpus, TINY_IDS[0]).unit["licence"] == "apache-2.0"  # kept, never invented


# ---------------------------------------------------------------------------- odd cases


def test_short_camera_top_within_the_tolerance_is_cut_with_a_note(tiny, adapter):
    rows = parquet(tiny, SHORT).num_rows
    ir = adapter.read_unit(tiny, SHORT)  # default tolerance: 2 frames
    assert validate_unit(ir) is None
    assert ir.unit["num_frames"] == rows - 1
    assert ir.frames.num_rows == rows - 1 and ir.signals.num_rows == 2 * (rows - 1)
    assert any(
        f"{rows - 1} decodable frames but the parquet has {rows} rows (1 frame short)" in n
        and "dropped 1 trailing signal row" in n
        for n in ir.notes
    )
    got = adapter.read_frames(tiny, SHORT, "camera_top", [rows - 2])  # the last usable frame decodes, as itself
    assert decode_frame_index(got[rows - 2]) == rows - 2
    with pytest.raises(UnitError):
        adapter.read_frames(tiny, SHORT, "camera_top", [rows - 1])  # the missing one never decodes


def test_short_camera_top_quarantined_when_strict(tiny):
    rows = parquet(tiny, SHORT).num_rows
    with pytest.raises(UnitError) as exc:
        Gm100Adapter(frame_count_tolerance=0).read_unit(tiny, SHORT)
    assert f"{rows - 1} decodable frames but the parquet has {rows} rows (1 frame short)" in exc.value.reason
    assert exc.value.file == f"task_00002/{TOP}/episode_000001.mp4"


def test_longer_gap_is_quarantined(corpus, adapter):
    path = samples.unit_paths(corpus, TINY_IDS[2])[0]
    t = pq.read_table(path)
    pq.write_table(t.slice(0, t.num_rows - 10), path)  # video now 10 frames longer than the parquet
    with pytest.raises(UnitError, match="10 frames extra"):
        adapter.read_unit(corpus, TINY_IDS[2])


def test_partial_download_videos_for_some_episodes_is_absent_not_broken(corpus, tmp_path):
    from pipeline.ingest.run import ingest_source, summary_text

    for unit_id in TINY_IDS[:2]:  # all parquet files, but the videos of two episodes never downloaded
        for cam in ("camera_top", "camera_wrist_left", "camera_wrist_right"):
            samples.unit_paths(corpus, unit_id, cam)[1].unlink(missing_ok=True)
    samples.corrupt_video(corpus, TINY_IDS[2], "camera_top", keep=0.3)  # truncated: still broken
    res = ingest_source("gm100", corpus, {"camera": "camera_top"})
    assert sorted(res.absent["unit_id"].to_list()) == TINY_IDS[:2]
    assert all("not downloaded" in r for r in res.absent["reason"].to_list())
    assert res.absent["file"].to_list()[0].endswith("episode_000000.mp4")
    assert res.quarantine["unit_id"].to_list() == [TINY_IDS[2]]
    assert "cannot be read" in res.quarantine["reason"][0]
    assert res.units["unit_id"].to_list() == [SHORT]
    text = summary_text("gm100", res)
    assert "2 absent (not downloaded)" in text and "1 quarantined" in text


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_mp4_is_a_unit_error(corpus, adapter, keep):
    samples.corrupt_video(corpus, TINY_IDS[0], "camera_top", keep=keep)
    with pytest.raises(UnitError) as exc:
        adapter.read_unit(corpus, TINY_IDS[0])
    assert "camera_top video cannot be read" in exc.value.reason
    assert exc.value.file == f"task_00001/{TOP}/episode_000000.mp4"
    with pytest.raises(UnitError):
        adapter.read_frames(corpus, TINY_IDS[0], "camera_top", [0])
    assert_others_read(adapter, corpus, GOOD[1:])


def test_corrupt_wrist_video_only_fails_its_frames(corpus, adapter):
    samples.corrupt_video(corpus, TINY_IDS[0], "camera_wrist_left", keep=0.3)
    assert validate_unit(adapter.read_unit(corpus, TINY_IDS[0])) is None  # primary camera is fine
    with pytest.raises(UnitError, match="camera_wrist_left"):
        adapter.read_frames(corpus, TINY_IDS[0], "camera_wrist_left", [0, 5])


def test_missing_primary_video_is_a_unit_error(corpus, adapter):
    samples.unit_paths(corpus, TINY_IDS[2])[1].unlink()
    with pytest.raises(UnitError, match="primary camera 'camera_top' video is missing"):
        adapter.read_unit(corpus, TINY_IDS[2])


def test_missing_and_empty_roots_are_source_errors(tmp_path, adapter):
    with pytest.raises(SourceError, match="does not exist"):
        adapter.discover(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="is empty") as exc:
        adapter.discover(tmp_path / "empty")
    assert str(tmp_path) not in str(exc.value)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README.md").write_text("hello")
    with pytest.raises(SourceError, match="no task_XXXXX folders"):
        adapter.discover(tmp_path / "other")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SourceError, match="not a directory"):
        adapter.discover(tmp_path / "afile")


def test_root_pointing_at_one_task_folder_is_a_source_error(tiny, adapter):
    with pytest.raises(SourceError, match="single LeRobot dataset"):
        adapter.discover(tiny / "task_00001")


# ids escaping the root: tests/test_adapter_contract.py; here the GM-100-specific malformed ones
@pytest.mark.parametrize("bad", ["task_00001__episode_7", "task_00001__episode_000000.mp4"])
def test_malformed_unit_ids(tiny, adapter, bad):
    with pytest.raises(UnitError):
        adapter.read_unit(tiny, bad)
    with pytest.raises(UnitError):
        adapter.read_frames(tiny, bad, "camera_top", [0])


def test_task_folder_and_video_linked_from_another_disk_are_read(corpus, tmp_path, adapter):
    outside = tmp_path / "outside" / "task_00001"
    shutil.move(corpus / "task_00001", outside)
    os.symlink(outside, corpus / "task_00001", target_is_directory=True)
    vid = samples.unit_paths(corpus, TINY_IDS[0])[1]
    target = tmp_path / "elsewhere.mp4"
    shutil.move(vid, target)
    os.symlink(target, vid)
    assert adapter.discover(corpus) == TINY_IDS
    assert validate_unit(adapter.read_unit(corpus, TINY_IDS[0])) is None
    assert adapter.read_frames(corpus, TINY_IDS[0], "camera_top", [0])[0].shape[2] == 3
    assert_others_read(adapter, corpus, GOOD)


def test_task_folder_without_info_json(corpus, adapter):
    samples.remove_info_json(corpus, "task_00001")
    ids = adapter.discover(corpus)
    assert ids == TINY_IDS  # still listed (episodes.jsonl / parquet files), so its units are quarantined
    for u in TINY_IDS[:2]:
        with pytest.raises(UnitError, match="meta/info.json is missing") as exc:
            adapter.read_unit(corpus, u)
        assert exc.value.file == "task_00001/meta/info.json"
    assert_others_read(adapter, corpus, [TINY_IDS[2]])
    # nothing left to list the episodes from: the task is reported as a placeholder unit
    shutil.rmtree(corpus / "task_00001" / "meta")
    shutil.rmtree(corpus / "task_00001" / "data")
    assert "task_00001__unlisted" in adapter.discover(corpus)
    with pytest.raises(UnitError, match="no meta/info.json and no episode files"):
        adapter.read_unit(corpus, "task_00001__unlisted")


def test_unreadable_parquet_is_a_unit_error(corpus, adapter):
    path = samples.unit_paths(corpus, TINY_IDS[0])[0]
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UnitError, match="parquet cannot be read") as exc:
        adapter.read_unit(corpus, TINY_IDS[0])
    assert exc.value.file == "task_00001/data/chunk-000/episode_000000.parquet"
    path.unlink()
    with pytest.raises(UnitError, match="parquet is missing"):
        adapter.read_unit(corpus, TINY_IDS[0])
    assert_others_read(adapter, corpus, [TINY_IDS[2]])


def test_ragged_list_column_is_a_unit_error(corpus, adapter):
    path = samples.unit_paths(corpus, TINY_IDS[0])[0]
    t = pq.read_table(path)
    rows = t.column("observation.state.arm.position").to_pylist()
    rows[3] = rows[3][:11]
    i = t.schema.get_field_index("observation.state.arm.position")
    pq.write_table(t.set_column(i, "observation.state.arm.position", pa.array(rows, pa.list_(pa.float32()))), path)
    with pytest.raises(UnitError, match="ragged"):
        adapter.read_unit(corpus, TINY_IDS[0])


def _tree_hash(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_generator_is_deterministic(tiny, tmp_path):
    again = tmp_path / "again"
    samples.write(again, scale="tiny", seed=0)
    assert _tree_hash(again) == _tree_hash(tiny)
    samples.write(again, scale="tiny", seed=1)  # replaces its own earlier corpus
    assert _tree_hash(again) != _tree_hash(tiny)


def test_generator_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        samples.write(tmp_path / "data", scale="tiny")
    assert (tmp_path / "data" / "keep.txt").read_text() == "mine"


def test_plans_match_the_scales():
    demo = samples.plan("demo", 0)
    assert sorted(t.task_type for t in demo) == sorted(samples.TASK_TYPES)
    eps = [e for t in demo for e in t.episodes]
    assert 12 <= len(eps) <= 16 and all(200 <= e.n_frames <= 300 for e in eps)
    assert sum(e.top_codec == "av1" for e in eps) == 1 and sum(e.top_drop == 1 for e in eps) == 1
    assert sum(not t.tasks_jsonl for t in demo) == 1
    release = samples.plan("release", 0)
    assert len(release) == 106
    assert [t.task_id for t in release][:4] == ["task_00001", "task_00002", "task_00003", "task_00006"]
    assert {"task_00004", "task_00005", "task_00052", "task_00059"}.isdisjoint(t.task_id for t in release)
    eps = [e for t in release for e in t.episodes]
    assert len(eps) == 4186 and all(150 <= e.n_frames <= 200 for e in eps)
    assert {len(t.episodes) for t in release} == {39, 40}
    assert {
        t.task_type: sum(x.task_type == t.task_type for x in release) for t in release
    } == samples.RELEASE_TYPE_COUNTS
    assert all(t.width == 64 and t.height == 48 for t in release)


def _contact_runs(effort: np.ndarray) -> int:
    """The reference contact rule (labels.yaml contact.gm100): effort < baseline - 3 sigma for >= 5 frames."""
    k = max(1, int(len(effort) * 0.1))
    sigma, base = effort[:k].std(), np.median(effort[-k:])
    runs, cur = 0, 0
    for below in effort < base - 3 * sigma:
        cur = cur + 1 if below else 0
        runs += cur == 5
    return runs


def _directions(px: np.ndarray, py: np.ndarray) -> set[str]:
    """Image directions over 15-frame windows with the camera_top mapping (+x left, +y down)."""
    dx, dy = px[15:] - px[:-15], py[15:] - py[:-15]
    out = set()
    for x, y in zip(dx, dy):
        if max(abs(x), abs(y)) < 0.05:
            continue
        if abs(x) > 1.35 * abs(y):
            out.add("left" if x > 0 else "right")
        elif abs(y) > 1.35 * abs(x):
            out.add("down" if y > 0 else "up")
    return out


@pytest.mark.parametrize("task_type", samples.TASK_TYPES)
@pytest.mark.parametrize("n", [160, 260])
def test_signals_let_every_label_rule_fire(task_type, n):
    for ep in range(3):
        s = samples.episode_signals(0, "task_00042", task_type, ep, n, 30)
        pos, vel = s["observation.state.arm.position"], s["observation.state.arm.velocity"]
        eff = s["observation.state.effector.effort"]
        active = {}
        for arm, off, e in (("left", 0, 0), ("right", 6, 1)):
            speed = np.linalg.norm(vel[:, off : off + 3], axis=1)
            active[arm] = speed > 0.35
            used = arm in s["_windows"]
            assert _contact_runs(eff[:, e]) == (1 if used else 0), (arm, ep)
            assert (speed < 0.2).sum() > 20  # stationary stretches
            if used:
                assert (speed > 0.8).sum() >= 10  # clearly moving stretches
                assert _directions(pos[:, off], pos[:, off + 1]) == {"left", "right", "up", "down"}
            else:
                assert speed.max() < 0.1
        both, left, right = (
            active["left"] & active["right"],
            active["left"] & ~active["right"],
            active["right"] & ~active["left"],
        )
        idle = ~active["left"] & ~active["right"]
        assert idle[: int(n * 0.1)].all() and idle[-int(n * 0.1) :].all()
        if task_type == "bimanual_sequential":
            assert both.sum() > 0 and left.sum() >= 12 and right.sum() >= 12
        if task_type == "bimanual_sync":
            assert both.sum() >= 0.5 * (left | right | both).sum()
        if task_type == "single_left":
            assert right.sum() == 0 and left.sum() > 0
        if task_type == "single_right":
            assert left.sum() == 0 and right.sum() > 0


def test_lerobot_v3_layout_reads_like_v21(tiny, tmp_path):
    v3root = tmp_path / "v3"
    samples.write(v3root, scale="tiny", seed=0, codebase_version="v3.0")
    tdir = v3root / "task_00001"
    assert json.loads((tdir / "meta" / "info.json").read_text())["codebase_version"] == "v3.0"
    assert (tdir / "meta" / "episodes" / "chunk-000" / "file-000.parquet").is_file()
    assert [p.name for p in (tdir / "data" / "chunk-000").iterdir()] == ["file-000.parquet"]
    a = Gm100Adapter(camera="camera_top")
    assert a.discover(v3root) == a.discover(tiny) == TINY_IDS
    for uid in GOOD + [SHORT]:
        x, y = a.read_unit(tiny, uid), a.read_unit(v3root, uid)
        assert validate_unit(y) is None
        assert y.unit == x.unit, uid
        assert y.frames.equals(x.frames) and y.signals.equals(x.signals)
    # frame i of each episode is frame i, although the episodes share one mp4 per camera
    for uid in (TINY_IDS[0], TINY_IDS[2]):
        n = a.read_unit(v3root, uid).unit["num_frames"]
        got = a.read_frames(v3root, uid, "camera_top", [0, n // 2, n - 1])
        assert [decode_frame_index(got[i]) for i in (0, n // 2, n - 1)] == [0, n // 2, n - 1]
        with pytest.raises(UnitError, match="outside the episode"):
            a.read_frames(v3root, uid, "camera_top", [n + 5])


def _grey_mp4(path: Path, n: int, fps: int = 30) -> None:
    """An H.264 mp4 written with PyAV directly (not our generator): frame i is a flat grey of level 8 * i."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = 32, 24, "yuv420p"
        for i in range(n):
            for packet in s.encode(av.VideoFrame.from_ndarray(np.full((24, 32, 3), 8 * i, np.uint8), format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)


def test_independent_lerobot_v21_corpus_good_broken_absent(tmp_path):
    """A LeRobot v2.1 task folder written by hand (json + pyarrow + PyAV), not by the sample generator."""
    root = tmp_path / "gm100"
    task = root / "task_00005"
    (task / "meta").mkdir(parents=True)
    key = "observation.images.camera_top"
    features = {
        "timestamp": {"dtype": "float32", "shape": [1]},
        "frame_index": {"dtype": "int64", "shape": [1]},
        "observation.state.arm.position": {"dtype": "float32", "shape": [12]},
        "observation.state.arm.velocity": {"dtype": "float32", "shape": [12]},
        "observation.state.effector.effort": {"dtype": "float32", "shape": [2]},
        key: {"dtype": "video", "shape": [24, 32, 3], "info": {"video.fps": 30}},
    }
    info = {
        "codebase_version": "v2.1",
        "fps": 30,
        "chunks_size": 1000,
        "total_episodes": 3,
        "features": features,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
    }
    (task / "meta" / "info.json").write_text(json.dumps(info))
    (task / "meta" / "episodes.jsonl").write_text(
        "".join(json.dumps({"episode_index": e, "length": 24}) + "\n" for e in range(3))
    )
    (task / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "fold the towel"}) + "\n")
    for e in range(3):
        n = 24
        t = pa.table(
            {
                "timestamp": pa.array(np.arange(n) / 30.0, pa.float32()),
                "frame_index": pa.array(range(n), pa.int64()),
                "episode_index": pa.array([e] * n, pa.int64()),
                "task_index": pa.array([0] * n, pa.int64()),
                "observation.state.arm.position": [[0.01 * i] * 12 for i in range(n)],
                "observation.state.arm.velocity": [[0.1] * 12 for _ in range(n)],
                "observation.state.effector.effort": [[1.0, 2.0] for _ in range(n)],
            }
        )
        out = task / f"data/chunk-000/episode_{e:06d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(t, out)
    vids = task / "videos/chunk-000" / key
    _grey_mp4(vids / "episode_000000.mp4", 24)
    _grey_mp4(vids / "episode_000001.mp4", 24)
    data = (vids / "episode_000001.mp4").read_bytes()
    (vids / "episode_000001.mp4").write_bytes(data[: len(data) // 3])  # truncated download
    # episode 2: parquet only, its video never downloaded
    from pipeline.ingest.run import ingest_source

    res = ingest_source("gm100", root, {"camera": "camera_top"})
    ids = [f"task_00005__episode_00000{e}" for e in range(3)]
    assert res.units["unit_id"].to_list() == [ids[0]]
    assert res.quarantine["unit_id"].to_list() == [ids[1]]
    assert res.quarantine["file"][0] == f"task_00005/videos/chunk-000/{key}/episode_000001.mp4"
    assert res.absent["unit_id"].to_list() == [ids[2]]
    a = Gm100Adapter()
    ir = a.read_unit(root, ids[0])
    assert ir.unit["language"] == "fold the towel" and ir.unit["num_frames"] == 24
    got = a.read_frames(root, ids[0], "camera_top", [0, 11, 23])
    assert all(abs(float(got[i].mean()) - 8 * i) < 4 for i in (0, 11, 23))  # frame i is frame i


def test_gripper_width_from_effector_position_feeds_contact_and_phase_when_configured(corpus, adapter):
    """A hand-made episode: the effort never drops (no grasp by the effort rule), while effector.position (the gripper
    opening in metres, 0 .. 0.066 on the real files) closes on a 3 cm object on frames 20..49 of the right arm. The
    IR carries the opening as gripper_width per arm; the GM-100 contact rule reads it only when configured
    (labels.contact.gm100.gripper.enabled, off by default), and the phases follow the contacts."""
    from pipeline.settings.config import load_settings
    from pipeline.labels.contact import CONTACT_METHODS
    from pipeline.labels.phase import phase_from_contacts

    unit_id = TINY_IDS[2]
    path = samples.unit_paths(corpus, unit_id)[0]
    t = pq.read_table(path)
    n = t.num_rows
    assert n >= 60
    width = np.full((n, 2), 0.066, dtype=np.float32)
    width[20:50, 1] = 0.030  # right gripper holds an object
    width[:, 0] = 0.0  # left gripper closed on nothing all along
    effort = np.full((n, 2), 1.8, dtype=np.float32)
    for name, values in (("observation.state.effector.position", width), ("observation.state.effector.effort", effort)):
        field = t.schema.field(name)
        t = t.set_column(t.schema.get_field_index(name), field, pa.array(values.tolist(), type=field.type))
    pq.write_table(t, path)
    ir = adapter.read_unit(corpus, unit_id)
    assert validate_unit(ir) is None
    sig = ir.signals.to_pydict()
    arm = np.array(sig["arm"])
    arms = {
        a: {c: np.array(sig[c], dtype=np.float64)[arm == a] for c in ("gripper_effort", "gripper_width", "speed")}
        for a in ("left", "right")
    }
    assert np.allclose(arms["right"]["gripper_width"], width[:, 1]) and np.allclose(arms["left"]["gripper_width"], 0)

    spec = load_settings().labels.contact.for_source("gm100").model_dump()
    assert spec["gripper"]["enabled"] is False  # the default: the effort rule alone
    rule = CONTACT_METHODS[spec["method"]]
    unit = {"task_id": ir.unit["task_id"]}
    off, off_events = rule(unit, arms, ["left", "right"], "both", n, spec, {})
    assert not any(m.any() for m in off.values()) and all(ev == [] for ev in off_events.values())
    on_spec = {**spec, "gripper": {**spec["gripper"], "enabled": True}}
    on, on_events = rule(unit, arms, ["left", "right"], "both", n, on_spec, {})
    assert on_events["right"] == [(20, 50)] and np.flatnonzero(on["right"]).tolist() == list(range(20, 50))
    assert on_events["left"] == []  # closed on nothing is no hold
    phases = phase_from_contacts(
        n, on_events["right"], arms["right"]["speed"], **load_settings().labels.phase.for_source("gm100").model_dump()
    )
    # before: pre-approach / approach; then contact; then hold and carry / transfer while the object is held
    assert set(phases[:20].tolist()) <= {0, 1} and phases[20] == 2 and set(phases[25:50].tolist()) <= {3, 4}


def test_a_unit_kept_without_a_wrist_camera_says_so(corpus, adapter):
    """A partial download (camera_top there, a wrist video not): the unit is kept with a note naming the camera."""
    rel = next((corpus / "task_00001" / "videos").rglob("observation.images.camera_wrist_right/episode_000000.mp4"))
    rel.unlink()
    ir = adapter.read_unit(corpus, TINY_IDS[0])
    assert validate_unit(ir) is None and "camera_wrist_right" not in ir.unit["cameras"]
    assert any("kept without camera(s) camera_wrist_right: video not downloaded" in n for n in ir.notes), ir.notes
