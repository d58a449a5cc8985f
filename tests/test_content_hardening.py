"""Content hardening at the adapters and the IR boundary (issue 14): every bad input below is written by hand into a
copy of a tiny sample corpus, run through `ingest_source`, and must end as a quarantine row for exactly that unit,
with a path-free reason naming the field or the link, while the other units of the source still load.

    BAD_INPUTS      (name, source, how the corpus is broken, the unit it breaks, what the reason must say)
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.ingest.run import ingest_source
from pipeline.core.leaks import find_path_leaks
from upstream_adapters.gm100.adapter import Gm100Adapter
from upstream_adapters.ir import UnitError
from upstream_adapters.reassemble.adapter import ReassembleAdapter
from upstream_adapters.rh20t.adapter import Rh20tAdapter
from upstream_adapters.samples import aist as aist_samples
from upstream_adapters.samples import gm100 as gm_samples
from upstream_adapters.samples import reassemble as re_samples
from upstream_adapters.samples import rh20t as S

RE_UNITS = ["2025-01-09-13-57-17", "2025-01-10-17-54-09"]  # a normal recording, one without leading segments
GM_UNIT = "task_00001__episode_000000"
RH_SPECS = [S.SceneSpec(1, 1, 1, rating=5, n_frames=30), S.SceneSpec(8, 2, 2, rating=7, n_frames=30)]
AIST_TASK = ("task_004", "insert_usb_cable")
OPTIONS = {"reassemble": {"camera": "hand"}, "gm100": {"camera": "camera_top"}, "rh20t": {}, "aist": {}}


# ------------------------------------------------------------------------------------------------- base corpora
@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    out = {}
    re_full = tmp_path_factory.mktemp("re_full")
    re_samples.write(re_full, scale="tiny", seed=0)
    out["reassemble"] = tmp_path_factory.mktemp("re") / "reassemble"
    (out["reassemble"] / "data").mkdir(parents=True)
    for u in RE_UNITS:
        shutil.copy(re_full / "data" / f"{u}.h5", out["reassemble"] / "data" / f"{u}.h5")
    out["gm100"] = tmp_path_factory.mktemp("gm") / "gm100"
    gm_samples.write(out["gm100"], scale="tiny", seed=0)
    out["rh20t"] = tmp_path_factory.mktemp("rh") / "rh20t"
    S.write_root(out["rh20t"], RH_SPECS, seed=1, size=(64, 36))
    out["aist"] = tmp_path_factory.mktemp("aist") / "aist"
    out["aist"].mkdir()
    aist_samples.write_manifest(out["aist"])
    tid, name = AIST_TASK
    _, _, taxonomy, prompt = next(t for t in aist_samples.TASKS if t[0] == tid)
    (out["aist"] / name).mkdir()
    for ep in (0, 1):
        (out["aist"] / name / f"episode_{ep}.hdf5").write_bytes(
            aist_samples.episode_bytes(tid, name, taxonomy, prompt, ep, 30, (64, 48), seed=0)
        )
    return out


# ------------------------------------------------------------------------------------------------- the breakers
def _outside_h5(tmp: Path, data: np.ndarray) -> Path:
    """A file OUTSIDE the source root that a link inside the content points at."""
    p = tmp / "outside" / "elsewhere.h5"
    p.parent.mkdir(exist_ok=True)
    with h5py.File(p, "w") as f:
        f["data"] = data
    return p


def h5_external_link(h5: Path, tmp: Path, inside: str) -> None:
    with h5py.File(h5, "r+") as f:
        target = _outside_h5(tmp, np.asarray(f[inside][()]))
        del f[inside]
        f[inside] = h5py.ExternalLink(str(target), "/data")


def h5_virtual_dataset(h5: Path, tmp: Path, inside: str) -> None:
    with h5py.File(h5, "r+") as f:
        data = np.asarray(f[inside][()])
        target = _outside_h5(tmp, data)
        del f[inside]
        layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
        layout[...] = h5py.VirtualSource(str(target), "data", shape=data.shape)
        f.create_virtual_dataset(inside, layout)


def h5_external_storage(h5: Path, tmp: Path, inside: str) -> None:
    with h5py.File(h5, "r+") as f:
        data = np.ascontiguousarray(f[inside][()])
        raw = tmp / "outside" / "raw.bin"
        raw.parent.mkdir(exist_ok=True)
        raw.write_bytes(data.tobytes())
        del f[inside]
        f.create_dataset(inside, shape=data.shape, dtype=data.dtype, external=[(str(raw), 0, data.nbytes)])


def h5_set(h5: Path, inside: str, fn) -> None:
    with h5py.File(h5, "r+") as f:
        data = fn(np.asarray(f[inside][()]))
        del f[inside]
        f[inside] = data


def h5_attr(h5: Path, key: str, value) -> None:
    with h5py.File(h5, "r+") as f:
        f.attrs[key] = value


def re_file(root: Path) -> Path:
    return root / "data" / f"{RE_UNITS[0]}.h5"


def aist_file(root: Path) -> Path:
    return root / AIST_TASK[1] / "episode_0.hdf5"


def rh_scene(root: Path) -> Path:
    return root / S.CFG_DIR / RH_SPECS[0].name


def rh_meta(root: Path, **kw) -> None:
    p = rh_scene(root) / "metadata.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), **kw}))


def rh_tcp(root: Path, value: float) -> None:
    p = rh_scene(root) / "transformed" / "tcp_base.npy"
    obj = np.load(p, allow_pickle=True).item()
    for entries in obj.values():
        for e in entries:
            e["tcp"] = np.asarray(e["tcp"], dtype=np.float64).copy()
            e["tcp"][0] = value
    np.save(p, obj, allow_pickle=True)


def gm_parquet(root: Path, fn) -> None:
    p = gm_samples.unit_paths(root, GM_UNIT)[0]
    t = pq.read_table(p)
    t = fn(t)
    pq.write_table(t, p)


def gm_positions(value: float):
    def fn(t: pa.Table) -> pa.Table:
        name = "observation.state.arm.position"
        col = t.column(name).combine_chunks()
        m = col.flatten().to_numpy().reshape(len(col), -1).astype(np.float64)
        m[4, 0] = value
        i = t.schema.get_field_index(name)
        return t.set_column(i, t.schema.field(i), pa.array(m.tolist(), type=col.type))

    return fn


def gm_constant_clock(t: pa.Table) -> pa.Table:
    i = t.schema.get_field_index("timestamp")
    return t.set_column(i, t.schema.field(i), pa.array(np.full(t.num_rows, 1.5), type=t.schema.field(i).type))


def gm_info(root: Path, fn) -> None:
    p = root / "task_00001" / "meta" / "info.json"
    info = json.loads(p.read_text())
    fn(info)
    p.write_text(json.dumps(info))


def gm_camera_fps(value):
    def fn(info):
        info["fps"] = value
        for f in info["features"].values():
            if isinstance(f, dict) and isinstance(f.get("info"), dict) and "video.fps" in f["info"]:
                f["info"]["video.fps"] = value

    return fn


def gm_card(root: Path, text: str) -> None:
    (root / "task_00001" / "README.md").write_text(text)


RE0, AI0, RH0 = RE_UNITS[0], "task_004_episode_0", RH_SPECS[0].name
# (name, source, break(root, tmp), bad unit, reason must contain)
BAD_INPUTS = [
    (
        "re-external-link",
        "reassemble",
        lambda r, t: h5_external_link(re_file(r), t, "robot_state/pose"),
        RE0,
        "external link",
    ),
    (
        "re-virtual-dataset",
        "reassemble",
        lambda r, t: h5_virtual_dataset(re_file(r), t, "timestamps/hand"),
        RE0,
        "virtual dataset",
    ),
    (
        "re-external-storage",
        "reassemble",
        lambda r, t: h5_external_storage(re_file(r), t, "robot_state/pose"),
        RE0,
        "external raw storage",
    ),
    (
        "re-constant-clock",
        "reassemble",
        lambda r, t: h5_set(re_file(r), "timestamps/hand", lambda a: np.full_like(a, 1.7e9)),
        RE0,
        "constant",
    ),
    (
        "re-position-1e30",
        "reassemble",
        lambda r, t: h5_set(re_file(r), "robot_state/pose", lambda a: np.where(np.arange(a.shape[1]) == 0, 1e30, a)),
        RE0,
        "signals.pos_x magnitude",
    ),
    (
        "re-segment-text-path",
        "reassemble",
        lambda r, t: h5_set(re_file(r), "segments_info/0/text", lambda a: b"Pick /home/alice/secret/peg.txt"),
        RE0,
        "segments.text holds absolute path",
    ),
    (
        "aist-external-link",
        "aist",
        lambda r, t: h5_external_link(aist_file(r), t, "observations/qvel"),
        AI0,
        "external link",
    ),
    (
        "aist-virtual-dataset",
        "aist",
        lambda r, t: h5_virtual_dataset(aist_file(r), t, "observations/qpos"),
        AI0,
        "virtual dataset",
    ),
    (
        "aist-external-storage",
        "aist",
        lambda r, t: h5_external_storage(aist_file(r), t, "observations/qpos"),
        AI0,
        "external raw storage",
    ),
    ("aist-frame-rate-1e12", "aist", lambda r, t: h5_attr(aist_file(r), "frame_rate", 1e12), AI0, "units.fps"),
    ("aist-frame-rate-inf", "aist", lambda r, t: h5_attr(aist_file(r), "frame_rate", np.inf), AI0, "frame_rate"),
    (
        "aist-position-1e30",
        "aist",
        lambda r, t: h5_set(
            aist_file(r), "observations/qpos", lambda a: np.where(np.arange(len(a))[:, None] == 2, 1e30, a)
        ),
        AI0,
        "signals.pos_x magnitude",
    ),
    (
        "aist-prompt-path",
        "aist",
        lambda r, t: h5_set(aist_file(r), "text/prompt", lambda a: "see C:\\Users\\alice\\task.txt".encode()),
        AI0,
        "units.language holds Windows path",
    ),
    ("rh-rating-1e300", "rh20t", lambda r, t: rh_meta(r, rating=1e300), RH0, "units.rating"),
    ("rh-rating-inf", "rh20t", lambda r, t: rh_meta(r, rating=float("inf")), RH0, "rating"),
    ("rh-rating-99", "rh20t", lambda r, t: rh_meta(r, rating=99), RH0, "units.rating 99 outside"),
    ("rh-position-1e30", "rh20t", lambda r, t: rh_tcp(r, 1e30), RH0, "signals.pos_x magnitude"),
    (
        "gm-position-inf",
        "gm100",
        lambda r, t: gm_parquet(r, gm_positions(np.inf)),
        GM_UNIT,
        "signals.pos_x has non-finite",
    ),
    (
        "gm-position-minus-inf",
        "gm100",
        lambda r, t: gm_parquet(r, gm_positions(-np.inf)),
        GM_UNIT,
        "signals.pos_x has non-finite",
    ),
    ("gm-position-1e30", "gm100", lambda r, t: gm_parquet(r, gm_positions(1e30)), GM_UNIT, "signals.pos_x magnitude"),
    ("gm-constant-clock", "gm100", lambda r, t: gm_parquet(r, gm_constant_clock), GM_UNIT, "constant"),
    ("gm-fps-inf", "gm100", lambda r, t: gm_info(r, gm_camera_fps(float("inf"))), GM_UNIT, "units.fps"),
    ("gm-fps-1e308", "gm100", lambda r, t: gm_info(r, gm_camera_fps(1e308)), GM_UNIT, "units.fps"),
    (
        "gm-licence-path",
        "gm100",
        lambda r, t: gm_card(r, "---\nlicense: other\nlicense_name: /home/alice/LICENSE\n---\n"),
        GM_UNIT,
        "units.licence holds absolute path",
    ),
]


def _assert_path_free(res, root: Path) -> None:
    for r in res.quarantine.iter_rows(named=True):
        for key in ("reason", "file"):
            text = r[key] or ""
            assert str(root) not in text and not find_path_leaks(text), (key, text)


@pytest.mark.parametrize("name, slug, breaker, unit, expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_content_is_this_units_quarantine_row(bases, tmp_path, name, slug, breaker, unit, expected):
    root = tmp_path / "root" / slug
    shutil.copytree(bases[slug], root)
    breaker(root, tmp_path)
    res = ingest_source(slug, root, OPTIONS[slug])
    rows = {r["unit_id"]: r for r in res.quarantine.iter_rows(named=True)}
    assert unit in rows, f"{name}: not quarantined; quarantine={rows}"
    assert expected in rows[unit]["reason"], rows[unit]
    assert unit not in res.units["unit_id"].to_list()
    assert res.units.height >= 1  # the other units of the source still load
    _assert_path_free(res, tmp_path)


def test_links_name_the_file_relative_to_the_root(bases, tmp_path):
    for slug, path_of, rel in (
        ("reassemble", re_file, f"data/{RE0}.h5"),
        ("aist", aist_file, f"{AIST_TASK[1]}/episode_0.hdf5"),
    ):
        root = tmp_path / slug
        shutil.copytree(bases[slug], root)
        h5_external_link(
            path_of(root), tmp_path / slug, "timestamps/hand" if slug == "reassemble" else "observations/qvel"
        )
        res = ingest_source(slug, root, OPTIONS[slug])
        row = res.quarantine.filter(res.quarantine["unit_id"] == (RE0 if slug == "reassemble" else AI0)).row(
            0, named=True
        )
        assert row["file"] == rel and "external link" in row["reason"]


def test_frames_of_a_linked_file_are_refused_too(bases, tmp_path):
    root = tmp_path / "re"
    shutil.copytree(bases["reassemble"], root)
    h5_external_link(re_file(root), tmp_path, "hand")
    with pytest.raises(UnitError, match="external link 'hand'"):
        ReassembleAdapter().read_frames(root, RE0, "hand", [0])


def test_soft_links_inside_the_file_stay_allowed(bases, tmp_path):
    root = tmp_path / "re"
    shutil.copytree(bases["reassemble"], root)
    with h5py.File(re_file(root), "r+") as f:
        f["robot_state/pose_alias"] = h5py.SoftLink("/robot_state/pose")
    res = ingest_source("reassemble", root, OPTIONS["reassemble"])
    assert RE0 in res.units["unit_id"].to_list()


# ------------------------------------------------------------------------------------------------- one bad folder
def _raise_for(monkeypatch, func_name: str, bad: Path) -> None:
    real = getattr(os, func_name)

    def fake(path=".", *a, **kw):
        if isinstance(path, (str, os.PathLike)) and (Path(path) == bad or bad in Path(path).parents):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(os, func_name, fake)


def test_unreadable_gm100_task_folder_is_one_row(bases, tmp_path, monkeypatch):
    root = tmp_path / "gm100"
    shutil.copytree(bases["gm100"], root)
    _raise_for(monkeypatch, "stat", root / "task_00002" / "meta")
    _raise_for(monkeypatch, "listdir", root / "task_00002")
    res = ingest_source("gm100", root, OPTIONS["gm100"])
    rows = {r["unit_id"]: r for r in res.quarantine.iter_rows(named=True)}
    assert rows["task_00002__unlisted"]["reason"] == "task folder cannot be read: PermissionError"
    assert rows["task_00002__unlisted"]["file"] == "task_00002"
    assert res.units.height >= 1
    _assert_path_free(res, tmp_path)


def test_unreadable_aist_task_folder_is_one_row(bases, tmp_path, monkeypatch):
    root = tmp_path / "aist"
    shutil.copytree(bases["aist"], root)
    (root / "task_089" / "close_cardboard_box").mkdir(parents=True)
    _raise_for(monkeypatch, "listdir", root / "task_089")
    res = ingest_source("aist", root, OPTIONS["aist"])
    rows = {r["unit_id"]: r for r in res.quarantine.iter_rows(named=True)}
    assert "cannot be listed: PermissionError" in rows["task_089_unreadable"]["reason"]
    assert res.units["unit_id"].to_list() == ["task_004_episode_0", "task_004_episode_1"]


def test_unreadable_rh20t_cfg_folder_is_one_row(bases, tmp_path, monkeypatch):
    root = tmp_path / "rh20t"
    shutil.copytree(bases["rh20t"], root)
    (root / "RH20T_cfg5").mkdir()
    _raise_for(monkeypatch, "scandir", root / "RH20T_cfg5")
    res = ingest_source("rh20t", root, {"cfgs": None})
    rows = [(r["unit_id"], r["file"], r["reason"]) for r in res.quarantine.iter_rows(named=True)]
    assert ("*", "RH20T_cfg5", "folder cannot be listed: PermissionError") in rows
    assert res.units.height == 2


# ------------------------------------------------------------------------------------------------- metadata files
def _in_thread(fn, timeout: float = 20.0):
    """Run fn in a daemon thread; (finished, result-or-exception). A read blocked on a FIFO never finishes."""
    out: list = []
    th = threading.Thread(target=lambda: out.append(_call(fn)), daemon=True)
    th.start()
    th.join(timeout)
    return (not th.is_alive()), (out[0] if out else None)


def _call(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the error itself is what the test inspects
        return exc


def test_split_list_that_is_not_a_regular_file_is_refused_not_read(bases, tmp_path):
    root = tmp_path / "re"
    shutil.copytree(bases["reassemble"], root)
    (root / "splits").mkdir()
    (root / "splits" / "train_split1.txt").write_text(f"{RE_UNITS[1]}\n")
    os.mkfifo(root / "splits" / "test_split1.txt")  # a read would block the build forever
    try:
        done, res = _in_thread(lambda: ingest_source("reassemble", root, {"camera": "hand"}))
        assert done, "reading splits/*.txt blocked on a FIFO"
        rows = [(r["unit_id"], r["file"], r["reason"]) for r in res.quarantine.iter_rows(named=True)]
        assert ("*", "splits/test_split1.txt", "split list not read: not a regular file") in rows
        assert res.units.height == 2
        assert res.units.filter(res.units["unit_id"] == RE_UNITS[1])["official_split"].to_list() == ["train_split1"]
        done, res = _in_thread(
            lambda: ingest_source("reassemble", root, {"camera": "hand", "only_split": "test_split1"})
        )
        assert done and "not a regular file" in res.quarantine.filter(res.quarantine["unit_id"] == "*")["reason"][0]
    finally:  # release a reader still blocked on the FIFO (before the fix); ENXIO when nobody reads it
        try:
            os.close(os.open(root / "splits" / "test_split1.txt", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_unreadable_task_description_is_a_note_not_silence(bases, tmp_path):
    root = tmp_path / "rh"
    shutil.copytree(bases["rh20t"], root)
    (root / "task_description.json").mkdir()  # not a regular file
    ir = Rh20tAdapter().read_unit(root, RH0)
    assert ir.unit["language"] is None
    assert "task_description.json not read (not a regular file): language is null" in ir.notes


# ------------------------------------------------------------------------------------------------- path-free
class _Leaky:
    slug, name, unit_type = "gm100", "GM-100", "episode"
    issues: list = []

    def __init__(self, mode="unit", root=""):
        self.mode, self.root = mode, root

    def discover(self, root):
        if self.mode == "discover":
            raise PermissionError(13, "Permission denied", f"{root}/task_00009")
        return ["task_00001__episode_000000"]

    def read_unit(self, root, unit_id):
        raise PermissionError(13, "Permission denied", f"{Path(root).resolve()}/task_00001/data/x.parquet")


@pytest.fixture
def leaky(monkeypatch):
    import sys
    import types

    import upstream_adapters

    mod = types.ModuleType("leaky_adapter_mod")
    mod._Leaky = _Leaky
    monkeypatch.setitem(sys.modules, "leaky_adapter_mod", mod)
    monkeypatch.setitem(upstream_adapters.ADAPTERS, "gm100", "leaky_adapter_mod:_Leaky")


def test_reasons_and_logs_are_path_free(leaky, tmp_path, caplog):
    root = tmp_path / "gm"
    root.mkdir()
    with caplog.at_level("WARNING"):
        res = ingest_source("gm100", root, {})
    row = res.quarantine.row(0, named=True)
    assert row["reason"] == "unexpected PermissionError: [Errno 13] Permission denied: 'task_00001/data/x.parquet'"
    with caplog.at_level("WARNING"):
        res = ingest_source("gm100", root, {"mode": "discover"})
    row = res.quarantine.row(0, named=True)
    assert row["unit_id"] == "*" and "discovery failed: unexpected PermissionError" in row["reason"]
    assert "'task_00009'" in row["reason"]
    _assert_path_free(res, tmp_path)
    assert caplog.records and not any(str(tmp_path) in r.getMessage() for r in caplog.records)


def test_frame_errors_name_the_file_relative_to_the_root(bases, tmp_path):
    """read_frames reasons reach the frames stage's quarantine and logs without passing ingest: path-free too."""
    gm = tmp_path / "gm100"
    shutil.copytree(bases["gm100"], gm)
    gm_samples.unit_paths(gm, GM_UNIT)[1].write_bytes(b"not an mp4")
    with pytest.raises(UnitError) as e:
        Gm100Adapter(camera="camera_top").read_frames(gm, GM_UNIT, "camera_top", [0])
    assert str(tmp_path) not in e.value.reason and "task_00001/videos/" in e.value.reason
    rh = tmp_path / "rh20t"
    shutil.copytree(bases["rh20t"], rh)
    (rh_scene(rh) / f"cam_{S.PRIMARY}" / "color.mp4").write_bytes(b"not an mp4")
    with pytest.raises(UnitError) as e:
        Rh20tAdapter().read_frames(rh, RH0, S.PRIMARY, [0])
    assert str(tmp_path) not in e.value.reason and f"{S.CFG_DIR}/{RH0}/cam_{S.PRIMARY}/color.mp4" in e.value.reason


def test_redact_paths_makes_root_paths_relative_and_hides_others():
    from pipeline.core.leaks import redact_paths

    text = (
        "cannot open '/data/gm100/task_00001/x.mp4' (also /home/alice/y.h5, C:\\Users\\bob\\z, file:///mnt/q, ~/w.txt)"
    )
    out = redact_paths(text, ["/data/gm100"])
    assert out.startswith("cannot open 'task_00001/x.mp4' (also <path>,")
    assert not find_path_leaks(out) and out.count("<path>") == 4


def test_leak_scanner_reports_a_file_url_after_a_space_instead_of_crashing():
    # the "file URL" pattern had no forbidden-preceding set: `prev in None` raised TypeError in the release step
    assert find_path_leaks("licence at file:///mnt/share/LICENSE") == ["file URL 'file:///mnt/share/LICENSE'"]
