"""pipeline/frames: extraction into the content-addressed cache (pool, errors, zero decodes on a rebuild), composite
rendering (deterministic pixels), and the visual gate (reasons, quarantine schema)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.settings.config import load_settings
from pipeline.frames import gate as gate_mod
from pipeline.frames.cache import FrameCache
from pipeline.frames.extract import FRAME_TABLE_SCHEMA, DirectoryReaders, extract_frames, requests_from_items
from pipeline.frames.pixels import frame_stats, pixel_sha256
from pipeline.frames.render import add_image_hashes, image_hashes, render_item_images
from pipeline.frames.worker import CacheWriteError
from pipeline.core.io import compact_json
import packs
from upstream_adapters.ir import QUARANTINE_SCHEMA
from upstream_adapters.samples.common import decode_frame_index, encode_video, render_frame

W, H, N = 160, 128, 60
LABEL = {
    "font": "HERSHEY_SIMPLEX",
    "scale": 1.0,
    "thickness": 2,
    "color": [255, 255, 255],
    "background": [0, 0, 0],
    "position": "top_left",
    "margin": 8,
}


@pytest.fixture(scope="module")
def video_root(tmp_path_factory) -> Path:
    """<root>/src/<unit>/cam.mp4: two H.264 units, one HEVC unit, one AV1 unit."""
    root = tmp_path_factory.mktemp("vids")
    for unit, codec in [("u1", "h264"), ("u2", "h264"), ("u3", "hevc"), ("u4", "av1")]:
        frames = [render_frame(i, W, H, (i / N, 0.5), hue=hash(unit) % 50) for i in range(N)]
        encode_video(frames, 30, codec=codec, gop=30, path=root / "src" / unit / "cam.mp4")
    return root


def _requests(spec: dict[str, list[int]]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"source": "src", "unit_id": u, "camera": "cam", "frame_index": i} for u, idx in spec.items() for i in idx]
    )


class CrashingReaders(DirectoryReaders):
    """A reader factory whose worker process dies (like a decoder segfault) on unit `boom`."""

    def __call__(self, source):
        inner = super().__call__(source)

        def read(unit_id, camera, indices):
            if unit_id == "boom":
                os._exit(3)
            return inner(unit_id, camera, indices)

        return read


class RaisingReaders(DirectoryReaders):
    def __call__(self, source):
        inner = super().__call__(source)

        def read(unit_id, camera, indices):
            if unit_id == "u2":
                raise RuntimeError("storage exploded")
            return inner(unit_id, camera, indices)

        return read


def test_extract_pool_cache_and_rebuild_decodes_nothing(video_root, tmp_path):
    req = _requests(
        {
            "u1": [0, 5, 29, 30, 31, 59, 5],
            "u2": [10, 11, 12],
            "u3": [28, 29, 30, 31, 45],
            "u4": [1, 58],
            "missing": [3, 4],
        }
    )
    cache = FrameCache(tmp_path / "cache")
    table = extract_frames(req, DirectoryReaders(video_root), cache, workers=2)
    assert table.schema == pl.Schema(FRAME_TABLE_SCHEMA)
    assert table.height == 18  # distinct frames
    ok = table.filter(pl.col("status") == "ok")
    assert ok.height == 16 and cache.counters["decoded"] == 16
    for r in ok.iter_rows(named=True):  # cached pixels are the requested frame, stats match them
        img = cache.get(r["cache_key"])
        assert decode_frame_index(img) == r["frame_index"]
        assert pixel_sha256(img) == r["pixel_sha256"] and (r["height"], r["width"]) == (H, W)
        assert frame_stats(img, 16)["thumb"] == r["thumb"]
    err = table.filter(pl.col("status") == "error")
    assert set(err["unit_id"]) == {"missing"}
    assert all("no video for src/missing/cam" in r for r in err["reason"])

    # a rebuild (e.g. after a template change) with a fresh cache object on the same folder decodes nothing
    cache2 = FrameCache(tmp_path / "cache")
    table2 = extract_frames(req, DirectoryReaders(video_root), cache2, workers=2)
    assert cache2.counters["decoded"] == 0 and cache2.counters["hits"] == 16
    assert table2.filter(pl.col("status") == "ok").equals(ok)


def test_cache_keys_are_the_documented_hash(tmp_path):
    """cache.py: key = "<digest>.<frame_index>", digest = sha256(compact JSON ["pbframe", version, decoder id, reader
    id, source, unit_id, fingerprint, camera]); the per-video key builder gives exactly that (non-ASCII and quoting
    names included), and the key names its video's pack."""
    import hashlib

    cache = FrameCache(tmp_path / "cache")
    for unit, cam, idx in [("u1", "cam", [0, 7, 1234567]), ('ünit "q"\\', "cäm/1", [3])]:
        digest = hashlib.sha256(
            json.dumps(
                ["pbframe", "1", cache.decoder_id, "dir:x", "src", unit, "fp", cam],
                separators=(",", ":"),
                ensure_ascii=True,
            ).encode()
        ).hexdigest()
        want = [f"{digest}.{i}" for i in idx]
        assert cache.video_keys("src", unit, cam, idx, "dir:x", "fp") == want
        assert [cache.key("src", unit, cam, i, "dir:x", "fp") for i in idx] == want
        assert {cache.pack_path(k) for k in want} == {tmp_path / "cache" / "frames" / digest[:2] / f"{digest}.pack"}
    for bad in ("0" * 64, "0" * 64 + ".x", "0" * 63 + ".1", "0" * 64 + ".01"):
        with pytest.raises(ValueError, match="not a frame-cache key"):
            cache.lookup(bad)


def test_cache_is_deterministic_and_keyed_by_decoder(video_root, tmp_path):
    req = _requests({"u1": [3, 40]})
    a, b = FrameCache(tmp_path / "a"), FrameCache(tmp_path / "b")
    ta = extract_frames(req, DirectoryReaders(video_root), a, workers=1)
    tb = extract_frames(req, DirectoryReaders(video_root), b, workers=1)
    assert ta.equals(tb)
    assert a.pack_path(ta["cache_key"][0]).read_bytes() == b.pack_path(tb["cache_key"][0]).read_bytes()
    assert FrameCache(tmp_path / "c", decoder="pyav").key("s", "u", "c", 1, "r", "fp") != a.key(
        "s", "u", "c", 1, "r", "fp"
    )
    assert FrameCache(tmp_path / "c", version=2).key("s", "u", "c", 1, "r", "fp") != a.key("s", "u", "c", 1, "r", "fp")
    other = FrameCache(tmp_path / "n", png_filter="all")  # another PNG filter: other bytes, same pixels
    tn = extract_frames(req, DirectoryReaders(video_root), other, workers=1)
    assert tn["pixel_sha256"].to_list() == ta["pixel_sha256"].to_list()
    assert np.array_equal(other.get(tn["cache_key"][0]), a.get(ta["cache_key"][0]))
    # frames of one video written in two runs: the same pack bytes as in one
    c = FrameCache(tmp_path / "c2")
    for part in ([40], [3]):
        extract_frames(_requests({"u1": part}), DirectoryReaders(video_root), c, workers=1)
    assert c.pack_path(ta["cache_key"][0]).read_bytes() == a.pack_path(ta["cache_key"][0]).read_bytes()
    # a damaged pack is a miss, not a crash
    path = a.pack_path(ta["cache_key"][0])
    path.write_bytes(path.read_bytes()[:20])
    assert a.lookup(ta["cache_key"][0]) is None
    again = extract_frames(req, DirectoryReaders(video_root), a, workers=1)
    assert a.counters["decoded"] == 2 + 2 and again.equals(ta)


def test_errors_stay_per_video_and_per_frame(video_root, tmp_path):
    cache = FrameCache(tmp_path / "cache")
    req = _requests({"u1": [2, 3, N + 5], "u2": [1, 2]})
    table = extract_frames(req, RaisingReaders(video_root), cache, workers=1)
    rows = {(r["unit_id"], r["frame_index"]): r for r in table.iter_rows(named=True)}
    assert rows[("u1", 2)]["status"] == rows[("u1", 3)]["status"] == "ok"  # the bad index fails alone
    assert rows[("u1", N + 5)]["status"] == "error" and "not in video" in rows[("u1", N + 5)]["reason"]
    assert rows[("u2", 1)]["status"] == "error" and "storage exploded" in rows[("u2", 1)]["reason"]


def test_worker_crash_fails_only_its_video(video_root, tmp_path):
    cache = FrameCache(tmp_path / "cache")
    req = _requests({"u1": [1, 2], "boom": [1], "u2": [4]})
    table = extract_frames(req, CrashingReaders(video_root), cache, workers=2)
    status = {(r["unit_id"], r["frame_index"]): (r["status"], r["reason"]) for r in table.iter_rows(named=True)}
    assert status[("u1", 1)][0] == status[("u1", 2)][0] == status[("u2", 4)][0] == "ok"
    assert status[("boom", 1)][0] == "error" and "crashed" in status[("boom", 1)][1]


# ------------------------------------------------------------------------------------------------ rendering
def _frame(i: int) -> np.ndarray:
    """A fixed synthetic 320x240 frame per index, independent of the sample renderer (so the pinned hashes below
    track only the composite rendering: OpenCV resize, putText, layout)."""
    y, x = np.mgrid[0:240, 0:320]
    return np.stack([(x + 3 * i) % 256, (y * 2 + i) % 256, (x + y + 7 * i) % 256], axis=-1).astype(np.uint8)


def _spec(kind: str, labels, indices, size=None, gap=None) -> str:
    spec = {"version": 1, "kind": kind, "labels": labels, "frame_indices": indices, "size": size, "label": LABEL}
    if gap is not None:
        spec["gap"] = gap
    return compact_json(spec)


def test_composites_are_deterministic_and_shaped():
    t8 = {"frame_indices": [5, 50, 20], "render_spec_json": _spec("labelled_frames", ["X", "Y", "Z"], [5, 50, 20])}
    t9 = {"frame_indices": [40, 10], "render_spec_json": _spec("panels", ["X", "Y"], [40, 10], [256, 192], 16)}
    imgs8 = render_item_images(t8, _frame)
    imgs9 = render_item_images(t9, _frame)
    assert [i.shape for i in imgs8] == [(240, 320, 3)] * 3
    assert [i.shape for i in imgs9] == [(192, 256 * 2 + 16, 3)]
    # the label box is drawn top-left, the rest of the frame is untouched
    assert not np.array_equal(imgs8[0][8:40, 8:40], _frame(5)[8:40, 8:40])
    assert np.array_equal(imgs8[0][60:], _frame(5)[60:])
    assert (imgs9[0][:, 256:272] == 255).all()  # the white gap
    # deterministic: same pixels every time, and these exact pixels (pinned OpenCV/numpy; a change here means
    # published image hashes would no longer reproduce)
    assert image_hashes(render_item_images(t8, _frame)) == image_hashes(imgs8)
    assert image_hashes(imgs9) == ["2fbbc2de8aadc96b1be05cc2105cda5d1b23f27707e2df28ff5816f91620bcbd"]
    assert image_hashes(imgs8)[1] == "9f7ed208f314a47d6666b229223f53e74cba76506af11702e1f1fd7ef3af8ef6"
    # labels differ -> pixels differ
    t9b = {**t9, "render_spec_json": _spec("panels", ["Y", "X"], [40, 10], [256, 192], 16)}
    assert image_hashes(render_item_images(t9b, _frame)) != image_hashes(imgs9)


def test_plain_items_follow_the_size_policy():
    item = {"frame_indices_json": "[3, 7]", "render_spec_json": None}
    assert [i.shape for i in render_item_images(item, _frame)] == [(240, 320, 3)] * 2
    small = render_item_images(item, _frame, {"max_side": 160})
    assert [i.shape for i in small] == [(120, 160, 3)] * 2
    assert [i.shape for i in render_item_images(item, _frame, {"max_side": 1000})] == [(240, 320, 3)] * 2
    assert np.array_equal(render_item_images(item, _frame, {"max_side": None})[0], _frame(3))


def test_render_spec_must_match_item_frames():
    bad = {"frame_indices": [1, 2], "render_spec_json": _spec("panels", ["X", "Y"], [2, 1], None, 4)}
    with pytest.raises(ValueError):
        render_item_images(bad, _frame)


class FullDiskCache(FrameCache):
    """A frame cache whose pack writes fail as on a full disk."""

    def put_many(self, entries) -> None:
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_cache_write_error_stops_the_build_instead_of_dropping_items(video_root, tmp_path, workers):
    """Frames that decode but cannot be cached were error rows the gate dropped as "unreadable frame" (31 items and a
    unit lost, exit 0): now the frames stage raises, naming the first frame and the cause."""
    req = _requests({"u1": [1, 2], "u2": [3]})
    with pytest.raises(
        CacheWriteError,
        match=r"3 decoded frame\(s\) could not be written into the frame cache "
        r"\(first: src/u1 cam frame 1: .*No space left on device",
    ):
        extract_frames(req, DirectoryReaders(video_root), FullDiskCache(tmp_path / "cache"), workers=workers)


def test_a_cache_write_error_while_rendering_stops_the_build(video_root, tmp_path):
    """The render step decodes again the frames whose cache entries vanished; a failed write there raises too."""
    items = pl.DataFrame(
        {
            "candidate_key": ["b"],
            "source": ["src"],
            "unit_id": ["u1"],
            "camera": ["cam"],
            "frame_indices": [[10, 20, 30]],
            "render_spec_json": [_spec("labelled_frames", ["X", "Y", "Z"], [10, 20, 30])],
        }
    )
    readers = DirectoryReaders(video_root)
    table = extract_frames(requests_from_items(items), readers, FrameCache(tmp_path / "cache"), workers=1)
    for pack_file in (tmp_path / "cache").rglob("*.pack"):
        pack_file.unlink()
    with pytest.raises(CacheWriteError, match="No space left on device"):
        add_image_hashes(items, table, FullDiskCache(tmp_path / "cache"), {"max_side": 80}, open_reader=readers)


def test_add_image_hashes_from_cache_uses_render_memo(video_root, tmp_path):
    items = pl.DataFrame(
        {
            "candidate_key": ["a", "b", "c"],
            "source": ["src"] * 3,
            "unit_id": ["u1", "u1", "u3"],
            "camera": ["cam"] * 3,
            "frame_indices": [[1, 2], [10, 20, 30], [5, 6]],
            "render_spec_json": [None, _spec("labelled_frames", ["X", "Y", "Z"], [10, 20, 30]), None],
        }
    )
    cache = FrameCache(tmp_path / "cache")
    table = extract_frames(requests_from_items(items), DirectoryReaders(video_root), cache, workers=1)
    out = add_image_hashes(items, table, cache, {"max_side": 80})
    hashes = [json.loads(h) for h in out["image_hashes_json"]]
    assert [len(h) for h in hashes] == [2, 3, 2] and cache.counters["rendered"] == 3
    again = add_image_hashes(items, table, cache, {"max_side": 80})
    assert again["image_hashes_json"].equals(out["image_hashes_json"]) and cache.counters["render_hits"] == 3
    direct = render_item_images(
        items.row(1, named=True),
        lambda i: cache.get(table.filter((pl.col("unit_id") == "u1") & (pl.col("frame_index") == i))["cache_key"][0]),
    )
    assert image_hashes(direct) == hashes[1]


def test_threaded_render_gives_the_serial_hashes_in_item_order(video_root, tmp_path):
    """Videos are rendered on threads: every item gets the hashes a serial render gives, at its own row; counters
    (a bad frame entry decoded again, items sharing a render) are those of the serial run."""
    rng = np.random.default_rng(5)
    rows = []
    for n in range(40):
        unit = ["u1", "u2", "u3", "u4"][n % 4]
        idx = sorted(rng.choice(N, 3, replace=False).tolist())
        spec = _spec("labelled_frames", ["X", "Y", "Z"], idx, [96, 80]) if n % 3 == 0 else None
        rows.append(
            {
                "candidate_key": f"k{n:02d}",
                "source": "src",
                "unit_id": unit,
                "camera": "cam",
                "frame_indices": idx,
                "render_spec_json": spec,
            }
        )
    rows.append({**rows[5], "candidate_key": "same_as_k05"})  # same frames, same spec: one render for both
    items = pl.DataFrame(rows)
    readers = DirectoryReaders(video_root)
    table = extract_frames(requests_from_items(items), readers, FrameCache(tmp_path / "cache"), workers=1)
    damaged = table["cache_key"][7]
    path = FrameCache(tmp_path / "cache").pack_path(damaged)
    good = path.read_bytes()
    runs = {}
    for workers in (1, 4):
        (tmp_path / "cache" / "renders").exists() and shutil.rmtree(tmp_path / "cache" / "renders")
        path.write_bytes(good)
        packs.flip(path, damaged, "png")  # one bad record, decoded again through the reader; its pack's others read
        cache = FrameCache(tmp_path / "cache")
        out = add_image_hashes(items, table, cache, {"max_side": 80}, open_reader=readers, workers=workers)
        runs[workers] = (out, cache.counters)
    serial, threaded = runs[1], runs[4]
    assert threaded[0].equals(serial[0])
    assert {k: threaded[1][k] for k in ("rendered", "render_hits", "decoded", "bad_entries")} == {
        "rendered": 40,
        "render_hits": 1,
        "decoded": 1,
        "bad_entries": 1,
    }
    assert threaded[1] == serial[1]
    cache = FrameCache(tmp_path / "cache")
    key = {(u, i): k for u, i, k in table.select("unit_id", "frame_index", "cache_key").iter_rows()}
    for item, got in zip(items.iter_rows(named=True), threaded[0]["image_hashes_json"]):
        direct = image_hashes(
            render_item_images(item, lambda i: cache.get(key[(item["unit_id"], i)]), {"max_side": 80})
        )
        assert json.loads(got) == direct, item["candidate_key"]


# ------------------------------------------------------------------------------------------------ gate
def _frow(unit, i, *, status="ok", mean=100.0, std=40.0, sha=None, thumb=None, reason=None):
    return {
        "source": "src",
        "unit_id": unit,
        "camera": "cam",
        "frame_index": i,
        "cache_key": f"k{unit}{i}",
        "status": status,
        "reason": reason,
        "pixel_sha256": sha or f"sha-{unit}-{i}",
        "height": 10,
        "width": 10,
        "mean": mean,
        "std": std,
        "thumb": thumb if thumb is not None else bytes([i * 10 % 256] * 4).hex(),
    }


def test_native_size_plain_items_take_their_frames_hashes_without_reading_them(video_root, tmp_path):
    """A plain item whose frames the size policy keeps native shows exactly its frames: its hashes are the frame
    table's pixel hashes, in frame_indices order (repeats kept), with no cache read; an item with a render spec, or
    frames above max_side, is still rendered from the cached pixels."""
    items = pl.DataFrame(
        {
            "candidate_key": ["plain", "labelled"],
            "source": ["src"] * 2,
            "unit_id": ["u1", "u2"],
            "camera": ["cam"] * 2,
            "frame_indices": [[30, 2, 30], [4, 9]],
            "render_spec_json": [None, _spec("labelled_frames", ["X", "Y"], [4, 9])],
        }
    )
    cache = FrameCache(tmp_path / "cache")
    table = extract_frames(requests_from_items(items), DirectoryReaders(video_root), cache, workers=1)
    key = {(u, i): k for u, i, k in table.select("unit_id", "frame_index", "cache_key").iter_rows()}
    direct = {}  # what a full render from the cached pixels gives, native (max_side W) and downscaled (80)
    for max_side in (W, 80):
        direct[max_side] = [
            image_hashes(
                render_item_images(item, lambda i: cache.get(key[(item["unit_id"], i)]), {"max_side": max_side})
            )
            for item in items.iter_rows(named=True)
        ]
    assert direct[W][0] != direct[80][0]
    cache.pack_path(key[("u1", 2)]).unlink()  # u1's pixels gone: the native item needs none
    out = add_image_hashes(items, table, FrameCache(tmp_path / "cache"), {"max_side": W})
    assert [json.loads(h) for h in out["image_hashes_json"]] == direct[W]
    out = add_image_hashes(
        items, table, FrameCache(tmp_path / "cache"), {"max_side": 80}, open_reader=DirectoryReaders(video_root)
    )  # downscaled: rendered (u1 decoded again)
    assert [json.loads(h) for h in out["image_hashes_json"]] == direct[80]


def test_one_pack_per_video_and_new_frames_join_it(video_root, tmp_path):
    """One file per video, whatever the number of its frames; frames asked for later join their video's pack (one
    write per decode task), the frames already there kept and not decoded again."""
    cache = FrameCache(tmp_path / "cache")
    first = extract_frames(
        _requests({"u1": [1, 2, 3], "u2": [4], "u3": [5, 6]}), DirectoryReaders(video_root), cache, workers=1
    )
    files = sorted(p for p in (tmp_path / "cache" / "frames").rglob("*") if p.is_file())
    assert len(files) == 3 and all(p.suffix == ".pack" for p in files)  # no temp file left either
    more = FrameCache(tmp_path / "cache")
    table = extract_frames(_requests({"u1": [1, 2, 3, 40, 50]}), DirectoryReaders(video_root), more, workers=1)
    assert more.counters["decoded"] == 2 and more.counters["hits"] == 3
    assert len([p for p in (tmp_path / "cache" / "frames").rglob("*") if p.is_file()]) == 3
    assert packs.keys(more.pack_path(table["cache_key"][0])) == table["cache_key"].to_list()  # sorted by index
    for r in table.iter_rows(named=True):
        assert decode_frame_index(more.get(r["cache_key"])) == r["frame_index"]
    assert table.filter(pl.col("frame_index") <= 3).equals(first.filter(pl.col("unit_id") == "u1"))


def test_a_damaged_record_is_decoded_again_and_its_pack_rewritten(video_root, tmp_path, monkeypatch):
    """A damaged record (here: the last one cut short) is a bad entry; the frame is decoded again and its pack
    rewritten with it good, the pack's other records kept. A write that fails (a full disk) leaves no pack and no
    temp file, and stops the build (CacheWriteError)."""
    from pipeline.frames import cache as cache_mod

    req = _requests({"u1": [3, 8, 20]})
    cache = FrameCache(tmp_path / "cache")
    table = extract_frames(req, DirectoryReaders(video_root), cache, workers=1)
    last = table["cache_key"][2]
    path = cache.pack_path(last)
    good = path.read_bytes()
    packs.cut(path, last)
    again = FrameCache(tmp_path / "cache")
    keys = table["cache_key"].to_list()
    assert again.lookup_many(keys) == cache.lookup_many(keys)[:2] + [None]
    extract_frames(req, DirectoryReaders(video_root), again, workers=1)
    assert again.counters["bad_entries"] == 2 and again.counters["decoded"] == 1 and again.counters["hits"] == 2
    assert path.read_bytes() == good

    class FullDisk:
        def __init__(self, fd, mode):
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(28, "No space left on device")

    path.unlink()
    monkeypatch.setattr(cache_mod.os, "fdopen", FullDisk)
    with pytest.raises(CacheWriteError, match="No space left"):  # a build error, never rows the gate drops
        extract_frames(req, DirectoryReaders(video_root), FrameCache(tmp_path / "cache"), workers=1)
    assert not any(path.parent.iterdir())


def test_gate_reasons_and_quarantine_schema():
    cfg = load_settings()
    g = cfg.frames.gate
    ft = pl.DataFrame(
        [
            _frow("u", 1),
            _frow("u", 2),
            _frow("u", 3),
            _frow("u", 4, mean=g.black_max_mean - 1),
            _frow("u", 5, std=0.5),
            _frow("u", 6, sha="same"),
            _frow("u", 7, sha="same"),
            _frow("u", 8, thumb="10101010"),
            _frow("u", 9, thumb="10101011"),
            _frow("u", 10, status="error", reason="cannot read frames: boom"),
        ],
        schema=FRAME_TABLE_SCHEMA,
    )
    items = pl.DataFrame(
        {
            "candidate_key": ["ok", "black", "flat", "frozen", "near", "near_T6", "unreadable", "absent"],
            "source": ["src"] * 8,
            "unit_id": ["u"] * 8,
            "camera": ["cam"] * 8,
            "task_id": ["T1", "T1", "T1", "T8", "T3", "T6", "T1", "T1"],
            "frame_indices": [[1, 2, 3], [1, 4], [5], [6, 7, 1], [8, 9], [8, 9], [1, 10], [11]],
        }
    )
    kept, q = gate_mod.gate_items(items, ft, cfg)
    assert kept["candidate_key"].to_list() == ["ok", "near_T6"]
    assert q.schema == pl.from_arrow(QUARANTINE_SCHEMA.empty_table()).schema
    assert set(q["stage"]) == {"frames"} and q["file"].null_count() == q.height
    reasons = dict(zip([r.split(":")[0] for r in q["reason"]], q["reason"]))
    assert "black frame 4" in reasons["black"]
    assert "flat frame 5" in reasons["flat"]
    assert "identical frames 6 and 7" in reasons["frozen"]
    assert "near-identical frames 8 and 9" in reasons["near"]
    assert "unreadable frame 10 (cannot read frames: boom)" in reasons["unreadable"]
    assert "unreadable frame 11 (not extracted)" in reasons["absent"]
    assert kept.columns == items.columns
    # an empty item table passes through
    k0, q0 = gate_mod.gate_items(items.head(0), ft, cfg)
    assert k0.height == 0 and q0.height == 0


def test_a_read_error_quoting_an_absolute_path_is_quarantined_path_free():
    from pipeline.frames.worker import read_with_fallback

    def reader(unit_id, camera, indices):
        raise FileNotFoundError(2, "No such file or directory", "/home/alice/datasets/aist/task_001/episode_0.hdf5")

    got, failed = read_with_fallback(reader, "task_001_episode_0", "cam_high", [0])
    assert got == {} and "/home/" not in failed[0] and "alice" not in failed[0]
    assert failed[0].startswith("cannot read frames: FileNotFoundError")
