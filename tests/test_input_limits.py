"""Declared sizes are bounded before anything is allocated (build.input_limits): a few KB of upstream file that
declares a huge MP4 sample table, HDF5 dataset, image, JSON member or JSON nesting costs only its unit, quarantined
with the file and the bound named, and reading it stays under 1 GiB of address space above the process's baseline
(RLIMIT_AS, set in a fresh process after the imports). Degenerate archive members stay cheap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from bombs import REPO, mp4_declaring, probe

from pipeline.settings.config import load_settings
from pipeline.ingest.run import ingest_source
from pipeline.settings.errors import ConfigError
from upstream_adapters.base import load_json
from upstream_adapters.ir import UnitError
from upstream_adapters.samples import aist as A
from upstream_adapters.samples import reassemble as R
from upstream_adapters.samples import rh20t as S

SIZE = (64, 36)
GOOD, BAD = S.SceneSpec(1, 1, 1, rating=5, n_frames=30), S.SceneSpec(1, 2, 2, rating=6, n_frames=30)
REC_GOOD, REC_BAD = "2025-01-09-13-57-17", "2025-01-09-14-01-02"
_probe = probe


def _rh20t_root(tmp_path: Path) -> Path:
    root = tmp_path / "rh20t"
    S.write_root(root, [GOOD, BAD], seed=3, size=SIZE)
    return root


def _scene_file(root: Path, spec, rel: str) -> Path:
    return root / S.CFG_DIR / spec.name / rel


# ------------------------------------------------------------------------------------------------ bombs


def test_mp4_declaring_2e8_samples_is_refused_under_1gib(tmp_path):
    """A color.mp4 of a few KB on disk (sparse) whose consistent sample tables declare 2*10^8 one-byte samples:
    indexing it raised MemoryError under the 1 GiB cap (FFmpeg's index alone is ~5 GB; the OOM killer took the build
    at 6 GB); now the unit is refused from the box headers, naming the file and the bound."""
    root = _rh20t_root(tmp_path)
    mp4 = _scene_file(root, BAD, f"cam_{S.PRIMARY}/color.mp4")
    head, size = mp4_declaring(mp4.read_bytes(), 200_000_000)
    mp4.write_bytes(head)
    os.truncate(mp4, size)
    assert mp4.stat().st_blocks * 512 < 1 << 20
    got = _probe("rh20t", root, BAD.name, GOOD.name)
    assert "200000000 samples" in got["bad"] and "input_limits.max_video_samples (5000000)" in got["bad"], got
    assert got["bad_file"].endswith(f"{BAD.name}/cam_{S.PRIMARY}/color.mp4")
    assert "input_limits.max_video_samples" in got["bad_frames"], got
    assert got["good_frames"] == 30 and got["good_decoded"] == 1
    unbounded = _probe(
        "rh20t", root, BAD.name, GOOD.name, lifted=True, max_video_samples=10**12
    )  # the fault, reproduced
    assert unbounded["bad"] == "MemoryError" and unbounded["good_frames"] == 30


def test_mp4_fragments_count_towards_the_bound(tmp_path):
    from upstream_adapters.media.mp4_index import declared_samples

    trun = (28).to_bytes(4, "big") + b"trun" + bytes(4) + (3_000_000).to_bytes(4, "big") + bytes(12)
    traf = (8 + len(trun)).to_bytes(4, "big") + b"traf" + trun
    moof = (8 + len(traf)).to_bytes(4, "big") + b"moof" + traf
    path = tmp_path / "f.mp4"
    path.write_bytes(moof * 3)
    with open(path, "rb") as fh:
        assert declared_samples(fh) == 9_000_000
    with open(path, "rb") as fh:
        assert declared_samples(fh, max_boxes=4) == 4  # a walk past max_boxes stops, counting the bound


def test_hdf5_declaring_14gb_is_refused_under_1gib(tmp_path):
    """A REASSEMBLE recording of a few MB whose robot_state/pose declares 14 GB (chunked, never written): reading
    it whole asked for 14 GB; now the unit is refused naming the dataset and the bound."""
    root = tmp_path / "reassemble"
    for rec, seed in ((REC_GOOD, 5), (REC_BAD, 6)):
        R.write_recording(root / "data" / f"{rec}.h5", R.RecSpec(rec), "tiny", seed=seed)
    with h5py.File(root / "data" / f"{REC_BAD}.h5", "r+") as f:
        del f["robot_state/pose"]
        f.create_dataset("robot_state/pose", shape=(250_000_000, 7), dtype="f8", chunks=(1 << 14, 7))
    assert (root / "data" / f"{REC_BAD}.h5").stat().st_size < 8 << 20
    (root / "splits").mkdir()
    (root / "splits" / "test_split1.txt").write_text(f"{REC_GOOD}\n{REC_BAD}\n")
    got = _probe("reassemble", root, REC_BAD, REC_GOOD)
    assert "'/robot_state/pose' declares 14000000000 bytes" in got["bad"], got
    assert "input_limits.max_hdf5_dataset_bytes" in got["bad"] and got["bad_file"] == f"data/{REC_BAD}.h5"
    assert got["good_decoded"] == 1
    unbounded = _probe("reassemble", root, REC_BAD, REC_GOOD, lifted=True, max_hdf5_dataset_bytes=10**15)  # the fault
    assert unbounded["bad"] == "MemoryError"


def _aist_root(tmp_path: Path) -> Path:
    root = tmp_path / "aist"
    root.mkdir()
    A.write_manifest(root)
    tid, name, taxonomy, prompt = next(t for t in A.TASKS if t[0] == "task_004")
    folder = root / name
    folder.mkdir()
    for ep in (0, 1):
        (folder / f"episode_{ep}.hdf5").write_bytes(
            A.episode_bytes(tid, name, taxonomy, prompt, ep, 20, (64, 48), seed=0)
        )
    return root


def test_jpeg_declaring_30000_squared_is_refused_under_1gib(tmp_path):
    """An AIST JPEG row whose header declares 30000 x 30000 (2.7 GB of RGB once decoded): refused from the header,
    at ingest and when its frames are asked for."""
    root = _aist_root(tmp_path)
    path = root / "insert_usb_cable" / "episode_1.hdf5"
    with h5py.File(path, "r+") as f:
        rows = f["observations/images/cam_high"]
        for i in range(rows.shape[0]):
            row = bytearray(rows[i].tobytes())
            sof = row.find(b"\xff\xc0")
            row[sof + 5 : sof + 9] = (30000).to_bytes(2, "big") * 2
            rows[i] = np.frombuffer(bytes(row), np.uint8)
    got = _probe("aist", root, "task_004_episode_1", "task_004_episode_0")
    assert "declares 900000000 pixels" in got["bad"] and "input_limits.max_image_pixels" in got["bad"], got
    assert got["bad_file"] == "insert_usb_cable/episode_1.hdf5"
    assert "input_limits.max_image_pixels" in got["bad_frames"]
    assert got["good_frames"] == 20 and got["good_decoded"] == 1
    unbounded = _probe("aist", root, "task_004_episode_1", "task_004_episode_0", lifted=True, max_image_pixels=10**12)
    assert "Failed to allocate 2700000000 bytes" in unbounded["bad"]  # the fault: OpenCV asks for 2.7 GB


@pytest.mark.parametrize("archive", [True, False])
def test_json_member_over_the_metadata_bound_is_refused_before_reading(tmp_path, archive):
    """metadata.json past max_metadata_bytes, as a tar.gz member (refused from the archive's index, before a byte is
    inflated: the cap that applied to files on disk now applies inside archives) or as a file."""
    root = tmp_path / "rh20t"
    S.write_root(root, [GOOD, BAD], seed=3, size=SIZE, archive=archive)
    big = json.loads(S.scene_files(BAD, 3, SIZE)["metadata.json"])
    big["pad"] = os.urandom(3 << 20).hex()  # 6 MiB of text that barely compresses (no compression-ratio refusal)
    if archive:  # rewrite the archive with the padded member
        import tarfile

        tgz = root / f"{S.CFG_DIR}.tar.gz"
        with tarfile.open(tgz) as tf:
            members = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
        members[f"{S.CFG_DIR}/{BAD.name}/metadata.json"] = json.dumps(big).encode()
        _write_tgz(tgz, members)
    else:
        _scene_file(root, BAD, "metadata.json").write_text(json.dumps(big))
    got = _probe("rh20t", root, BAD.name, GOOD.name, max_metadata_bytes=1 << 20)
    assert "metadata.json is" in got["bad"] and "input_limits.max_metadata_bytes (1048576)" in got["bad"], got
    assert got["bad_file"].endswith(f"{BAD.name}/metadata.json")
    assert got["good_frames"] == 30


def _write_tgz(path: Path, members: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tf:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_deep_json_is_a_reason_never_a_recursion_error(tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(UnitError, match="max_json_depth") as e:
        load_json(deep, "x.json")
    assert e.value.file == "x.json"
    with pytest.raises(UnitError, match=r"max_json_depth \(64\)"):
        load_json(json.dumps({"a": [[[[{"b": 1}]]]] * 1}).replace("1", "[" * 70 + "]" * 70), "y.json")
    assert load_json('{"a": [[1]]}', "z.json") == {"a": [[1]]}
    root = _rh20t_root(tmp_path)
    (root / "task_description.json").write_text('{"task_0001": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _scene_file(root, BAD, "metadata.json").write_text('{"rating": ' + "[" * 100_000 + "]" * 100_000 + "}")
    res = ingest_source("rh20t", root, load_settings().sources["rh20t"].adapter.options())
    # the deep task table costs the language of the units it describes (a note), not the units
    assert res.units["unit_id"].to_list() == [GOOD.name]
    notes = res.notes.filter(res.notes["unit_id"] == GOOD.name)["note"].to_list()
    assert any("task_description.json not read" in n and "max_json_depth" in n for n in notes), notes
    q = res.quarantine.to_dicts()
    assert [r["unit_id"] for r in q] == [BAD.name] and "max_json_depth (64)" in q[0]["reason"]
    assert q[0]["file"].endswith(f"{BAD.name}/metadata.json")


def test_ten_thousand_empty_zip_members_are_cheap(tmp_path, monkeypatch):
    """10,000 empty episode members in one task zip: each is its unit's row ("empty"), refused from the central
    directory read once while listing, never by opening the zip again per unit (18 minutes before)."""
    root = _aist_root(tmp_path)
    tid, name, taxonomy, prompt = next(t for t in A.TASKS if t[0] == "task_016")
    with zipfile.ZipFile(root / f"{name}.zip", "w") as zf:
        for ep in range(10_000):
            zf.writestr(f"{name}/episode_{ep}.hdf5", b"")
    opened = []
    real = zipfile.ZipFile.__init__
    monkeypatch.setattr(zipfile.ZipFile, "__init__", lambda self, *a, **k: opened.append(1) or real(self, *a, **k))
    res = ingest_source("aist", root, load_settings().sources["aist"].adapter.options())
    q = res.quarantine.filter(res.quarantine["unit_id"].str.starts_with("task_016"))
    assert q.height == 10_000 and all("is empty (0 bytes)" in r for r in q["reason"].to_list())
    assert res.units.height == 2
    assert len(opened) <= 3, len(opened)


def test_input_limits_are_typed_settings(tmp_path):
    import shutil

    shutil.copytree(REPO / "configs", tmp_path / "configs")
    path = tmp_path / "configs" / "build.yaml"
    data = yaml.safe_load(path.read_text())
    data["build"]["input_limits"]["max_video_samples"] = 0
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="max_video_samples"):
        load_settings(tmp_path / "configs")
    cfg = load_settings()
    assert all(src.adapter.input_limits == cfg.build.input_limits.model_dump() for src in cfg.sources.values())


def test_input_limits_are_in_the_config_hash_and_the_ingest_fingerprint():
    """The bounds decide which units are refused, so they can change the release: they are not among the keys that
    change no output (pipeline/core/digests.py NO_OUTPUT_KEYS, the one list), and editing them changes provenance.json's
    config hash and re-runs ingest."""
    from pipeline.core.digests import NO_OUTPUT_KEYS, config_part, digest
    from pipeline.publish.provenance import config_hash

    assert all("input_limits" not in keys for keys in NO_OUTPUT_KEYS.values())
    cfg = load_settings()
    base = cfg
    other = cfg.with_values(
        {
            "build.input_limits.max_json_depth": 5,
            **{f"sources.{s}.adapter.input_limits.max_json_depth": 5 for s in cfg.sources},
        }
    )
    assert config_hash(other) != config_hash(base)
    assert digest(config_part(other, ("sources.gm100",))) != digest(config_part(base, ("sources.gm100",)))


# ------------------------------------------------------------------------------------------------ a reader killed

_KILLED = """
import os, signal, sys
from pathlib import Path
from pipeline.settings.config import load_settings
from pipeline.ingest.run import ingest_source
from upstream_adapters.aist.adapter import AistAdapter
root, state, victim = sys.argv[1:4]
real = AistAdapter.read_unit
def read_unit(self, r, unit_id):
    if unit_id == victim:  # what the kernel's out-of-memory killer does to a reader: no handler runs
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, r, unit_id)
AistAdapter.read_unit = read_unit
ingest_source("aist", Path(root), load_settings().sources["aist"].adapter.options(), state=Path(state))
"""


def test_a_reader_killed_on_a_unit_names_it_and_then_costs_only_that_unit(tmp_path):
    from pipeline.ingest.guard import held_note

    root, state, victim = _aist_root(tmp_path), tmp_path / "work" / "ir" / "aist", "task_004_episode_1"
    opts = load_settings().sources["aist"].adapter.options()
    for death in (1, 2):
        res = subprocess.run(
            [sys.executable, "-c", _KILLED, str(root), str(state), victim],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == -9, res.stderr[-2000:]
        note = held_note(state, "aist")
        assert f"ingest of aist died while reading unit {victim!r}" in note
        assert ("reads it once more" if death == 1 else "quarantines it") in note, note
    res = ingest_source("aist", root, opts, state=state)
    assert res.units["unit_id"].to_list() == ["task_004_episode_0"]
    (row,) = res.quarantine.to_dicts()
    assert row["unit_id"] == victim and "died while reading this unit in 2 earlier runs" in row["reason"]
    assert held_note(state, "aist") is None and not Path(f"{state}.reading").exists()
    assert ingest_source("aist", root, opts, state=state).quarantine.height == 1  # still refused, files unchanged
    path = root / "insert_usb_cable" / "episode_1.hdf5"
    with h5py.File(path, "r+") as f:  # its files change: it is read again
        f.attrs["edited"] = 1
    res = ingest_source("aist", root, opts, state=state)
    assert res.quarantine.height == 0 and res.units.height == 2
    assert not Path(f"{state}.died.json").exists()


def test_one_death_then_a_good_read_is_forgotten(tmp_path):
    root, state, victim = _aist_root(tmp_path), tmp_path / "ir" / "aist", "task_004_episode_1"
    res = subprocess.run(
        [sys.executable, "-c", _KILLED, str(root), str(state), victim],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == -9
    opts = load_settings().sources["aist"].adapter.options()
    assert ingest_source("aist", root, opts, state=state).units.height == 2  # one death may be bad luck: read again
    assert not Path(f"{state}.died.json").exists() and not Path(f"{state}.reading").exists()
