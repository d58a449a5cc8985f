"""The frame cache proves its entries (issue 14, item 2; packs: issue 9): a video changed under the same unit id gets
new image hashes on a warm rebuild (keys carry the unit's upstream fingerprint, and the items step re-runs on an
upstream change); a truncated pack, a cut last record, a flipped byte, a record showing other pixels than its stats,
a record or a whole pack of another video, an empty or foreign file, or a swapped render memo, is detected, never
used, decoded or rendered again (the pack rewritten good), and the stage ends with the same items as before."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import polars as pl
import pytest

from assets.fingerprint import run_step
from assets.tables import source_steps, tables_by_name
from pipeline import stages
from pipeline.settings.config import load_settings
from pipeline.frames import memos
from pipeline.frames.cache import BadEntry, FrameCache
from pipeline.frames.pixels import encode_png, frame_stats, pixel_sha256
from upstream_adapters import get_adapter
from upstream_adapters.media import video
from upstream_adapters.samples.common import encode_video

import packs


def _cfg(samples: dict, work: Path) -> dict:
    cfg = load_settings(upstream={k: str(v) for k, v in samples.items()}, scale="demo")
    # in-process: small demo work, and the counters are this process's
    return cfg.with_values({"build.work_dir": str(work), "frames.workers": 1})


def _items(work: Path, slug: str) -> pl.DataFrame:
    return pl.read_parquet(work / "items" / f"{slug}.parquet")


def _replace_video(path: Path) -> None:
    """Re-encode the video with inverted colours: same frame count and rate, other pixels (a re-released file)."""
    with av.open(str(path)) as c:
        rate = Fraction(c.streams.video[0].average_rate)
    n = video.count_frames(path)
    frames = video.read_frames(path, list(range(n)))
    encode_video([255 - frames[i] for i in range(n)], float(rate), codec="h264", gop=10, path=path)


def test_changed_video_under_the_same_unit_id_gets_new_hashes(demo_samples, demo_release, tmp_path):
    samples = dict(demo_samples)
    samples["gm100"] = tmp_path / "gm100"
    shutil.copytree(demo_samples["gm100"], samples["gm100"])
    work = tmp_path / "work"
    cfg = _cfg(samples, work)
    steps = source_steps("gm100")
    tables = tables_by_name(steps)
    for step in steps:  # a full build of the source into a fresh work folder, with its step records
        run_step(step, cfg, tables)
    before = _items(work, "gm100")
    victim, camera = before.group_by("unit_id", "camera").len().sort("len", "unit_id", descending=True).row(0)[:2]
    cam = camera.removeprefix("observation.images.")
    files = get_adapter("gm100", **cfg.sources["gm100"].adapter.options()).unit_files(samples["gm100"], victim)
    vid = next(p for rel, p, _ in files if rel.endswith(".mp4") and cam in rel)
    _replace_video(vid)

    # the warm rebuild: the items step must run (not be skipped as unchanged) and decode the changed unit again
    summaries = {step.name: run_step(step, cfg, tables)[:2] for step in steps}
    summary, skipped = summaries["items_gm100"]
    assert not skipped, "the items step was skipped although an upstream video changed"
    assert summary["frames_decoded"] > 0
    after = _items(work, "gm100")
    was = dict(zip(before["candidate_key"], before["image_hashes_json"]))
    now = dict(zip(after["candidate_key"], after["image_hashes_json"]))
    on_victim = set(before.filter((pl.col("unit_id") == victim) & (pl.col("camera") == camera))["candidate_key"])
    assert on_victim and all(now[k] != was[k] for k in on_victim & set(now)), "old image hashes shipped"
    assert all(now[k] == was[k] for k in set(now) & set(was) - on_victim)
    # and they are the hashes a cold build gives
    cold = tmp_path / "cold"
    shutil.copytree(work, cold, ignore=shutil.ignore_patterns("frame_cache", "_fingerprints"))
    stages.run_frames(_cfg(samples, cold), "gm100")
    assert _items(cold, "gm100")["image_hashes_json"].equals(after["image_hashes_json"])


def _frame(n: int) -> np.ndarray:
    """A small RGB frame, different per n."""
    y, x = np.mgrid[0:24, 0:32]
    return np.stack([(x * 5 + n) % 256, (y * 7 + 3 * n) % 256, (x + y + 11 * n) % 256], axis=-1).astype(np.uint8)


def _video(cache: FrameCache, unit: str, indices=(2, 5, 9, 14)) -> dict[str, np.ndarray]:
    """One video's frames written into the cache in one pack write: {key: pixels}."""
    keys = cache.video_keys("src", unit, "cam", list(indices), "dir:x", "fp")
    imgs = {k: _frame(i + len(unit) * 100 + ord(unit[-1])) for k, i in zip(keys, indices)}
    cache.put_many([(k, img, frame_stats(img, 16)) for k, img in imgs.items()])
    return imgs


def _plant(defect: str, path: Path, keys: list[str], other: Path) -> set[str]:
    """Plant `defect` in the pack at `path` (of frames `keys`, sorted); `other`: another video's pack. Returns the
    keys it makes bad."""
    if defect == "truncated":  # cut in the middle of its second record: that one and all after it are lost
        packs.cut(path, keys[1])
        return set(keys[1:])
    if defect == "cut_final_record":  # a writer killed in its last record
        packs.cut(path, keys[-1])
        return {keys[-1]}
    if defect in ("png_flipped", "thumb_flipped"):  # bit rot in one record's pixels or stats
        packs.flip(path, keys[1], defect.split("_")[0])
        return {keys[1]}
    if defect == "other_pixels":  # a valid record whose PNG shows other pixels than its stats
        packs.forge(path, keys[1], other_pixels=True)
        return {keys[1]}
    if defect == "renamed":  # a valid record naming another video's frame
        packs.forge(path, keys[1], new_key=packs.keys(other)[1])
        return {keys[1]}
    if defect == "replaced":  # another video's pack under this video's name
        shutil.copyfile(other, path)
        return set(keys)
    if defect == "empty":  # created, never written
        path.write_bytes(b"")
        return set(keys)
    if defect == "not_a_pack":  # e.g. a frame PNG of the older layout
        path.write_bytes(encode_png(_frame(1), 1))
        return set(keys)
    raise ValueError(defect)


DEFECTS = [
    "truncated",
    "cut_final_record",
    "png_flipped",
    "thumb_flipped",
    "other_pixels",
    "renamed",
    "replaced",
    "empty",
    "not_a_pack",
]


@pytest.mark.parametrize("defect", DEFECTS)
def test_a_planted_pack_defect_makes_exactly_its_entries_bad(tmp_path, defect):
    """Each damaged entry is a miss for lookup (counted, logged) and BadEntry for get; the pack's other records are
    still read, with their own pixels; no damaged entry is ever used."""
    cache = FrameCache(tmp_path)
    imgs = _video(cache, "u1")
    _video(cache, "u2")
    keys = list(imgs)
    path, other = cache.pack_path(keys[0]), cache.pack_path(cache.key("src", "u2", "cam", 2, "dir:x", "fp"))
    bad = _plant(defect, path, keys, other)
    fresh = FrameCache(tmp_path)
    assert [m is None for m in fresh.lookup_many(keys)] == [k in bad for k in keys]
    assert fresh.counters["bad_entries"] == len(bad)
    # the record checks (lengths, CRC, key) hold without decoding; only other pixels need the pixel hash
    header_bad = set() if defect == "other_pixels" else bad
    assert [fresh.lookup(k, pixels=False) is None for k in keys] == [k in header_bad for k in keys]
    for k in keys:
        if k in bad:
            with pytest.raises(BadEntry):
                fresh.get(k)
        else:
            assert np.array_equal(fresh.get(k), imgs[k]) and fresh.lookup(k)["pixel_sha256"] == pixel_sha256(imgs[k])
    assert [img is None for img in fresh.get_many(keys)] == [k in bad for k in keys]
    # a frame never written: absent from an intact part of a pack, bad when its index lies in a damaged part
    beyond = keys[0].rpartition(".")[0] + ".99"
    lost = defect in ("truncated", "cut_final_record", "replaced", "empty", "not_a_pack")
    if lost:
        with pytest.raises(BadEntry):
            fresh.get(beyond)
    else:
        with pytest.raises(KeyError):
            fresh.get(beyond)


def test_frames_added_to_a_pack_keep_the_old_ones(tmp_path):
    """A later write of other frames of a video merges them into its pack: the old frames stay readable, a rewritten
    frame replaces its record, and the bytes are those of writing all of them at once."""
    once, twice = FrameCache(tmp_path / "once"), FrameCache(tmp_path / "twice")
    _video(once, "u1", (2, 5, 9, 14))
    _video(twice, "u1", (9, 2))
    _video(twice, "u1", (14, 5, 9))
    k = once.key("src", "u1", "cam", 2, "dir:x", "fp")
    assert twice.pack_path(k).read_bytes() == once.pack_path(k).read_bytes()
    assert packs.keys(twice.pack_path(k)) == [once.key("src", "u1", "cam", i, "dir:x", "fp") for i in (2, 5, 9, 14)]


def test_bad_cache_entries_are_detected_and_decoded_again(demo_samples, demo_release, tmp_path):
    """Every planted pack defect on a built demo cache: the frames it damaged are counted bad and decoded again,
    their packs rewritten good, and the stage ends with the same items."""
    work = tmp_path / "work"
    # the build's cache also holds the T13 step items' frames, which the items stage never reads: a cache of the
    # items' frames alone, so every planted defect lies on the path under test
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    cfg = _cfg(demo_samples, work)
    slugs = cfg.build.sources
    for slug in slugs:
        stages.run_frames(cfg, slug)
    before = {s: _items(work, s) for s in slugs}
    cache = FrameCache.from_config(cfg)
    paths = [p for p in sorted((work / "frame_cache" / "frames").rglob("*.pack")) if len(packs.keys(p)) >= 3]
    picked = random.Random(14).sample(paths, len(DEFECTS) + 1)
    other, picked = picked[-1], picked[:-1]
    bad, planted = set(), {}
    for defect, path in zip(DEFECTS, picked):
        planted[path] = packs.keys(path)
        bad |= _plant(defect, path, planted[path], other)
    # render memos gone, so the frames' pixels are read again (the path where a bad entry reached the release)
    shutil.rmtree(work / "frame_cache" / "renders")
    outs = {s: stages.run_frames(cfg, s) for s in slugs}  # never fatal
    differ = [s for s in slugs if not _items(work, s).equals(before[s])]
    assert not differ, f"items differ after cache corruption: {differ}"
    assert sum(out["frame_cache_bad_entries"] for out in outs.values()) == len(bad)
    assert sum(out["frames_decoded"] for out in outs.values()) == len(bad)
    for path, keys in planted.items():  # rewritten, whole and good again
        assert packs.keys(path) == keys and None not in cache.lookup_many(keys)
    assert not [p for p in (work / "frame_cache" / "frames").rglob("*") if p.is_file() and p.suffix != ".pack"]


def _memo_lines(work: Path) -> dict[Path, list[bytes]]:
    return {
        t: t.read_bytes().splitlines(keepends=True)
        for t in sorted((work / "frame_cache" / "renders").glob("*" + memos.SUFFIX))
    }


def _aist_memo_table(demo_samples, demo_release, tmp_path):
    """A copy of the demo work folder whose render memos were made again by AIST's items step alone: (work, cfg, AIST
    items before, the one memo table, its lines)."""
    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work)
    cfg = _cfg(demo_samples, work)
    before = _items(work, "aist")
    shutil.rmtree(work / "frame_cache" / "renders")
    stages.run_frames(cfg, "aist")  # renders/ now holds exactly aist's memos, in one table
    ((table, lines),) = _memo_lines(work).items()
    return work, cfg, before, table, lines


def test_bad_render_memos_are_rendered_again(demo_samples, demo_release, tmp_path):
    work, cfg, before, table, lines = _aist_memo_table(demo_samples, demo_release, tmp_path)
    a, b, c = random.Random(3).sample(range(len(lines)), 3)
    key_a, key_c = json.loads(lines[a])["key"], json.loads(lines[c])["key"]
    memo_a = json.loads(lines[a])
    lines[a] = json.dumps({**memo_a, "hashes": json.loads(lines[b])["hashes"]}).encode() + b"\n"  # b's under a's key
    lines[c] = memos.memo_line(key_c, ["0" * 64] * 99)  # well-formed, wrong number of images for its item
    table.write_bytes(b"".join(lines))
    out = stages.run_frames(cfg, "aist")
    assert _items(work, "aist").equals(before)
    assert out["frame_cache_bad_entries"] == 2 and out["frames_decoded"] == 0
    # both were rendered again and the bad lines are gone: a third run meets no bad memo
    kept = [json.loads(line) for lines in _memo_lines(work).values() for line in lines]
    assert [m["hashes"] for m in kept if m["key"] == key_a] == [memo_a["hashes"]]
    (memo_c,) = [m for m in kept if m["key"] == key_c]  # the replaced memo is gone from its old table
    assert len(memo_c["hashes"]) != 99
    assert stages.run_frames(cfg, "aist")["frame_cache_bad_entries"] == 0


def test_a_cut_or_damaged_memo_table_is_detected_and_rendered_again(demo_samples, demo_release, tmp_path):
    """Tables are written atomically, but a table cut or damaged afterwards (a full disk, a bad copy) must not be
    trusted line by line: a cut line and a flipped byte are both detected, the rest of the table is still used."""
    work, cfg, before, table, lines = _aist_memo_table(demo_samples, demo_release, tmp_path)
    flipped = bytearray(lines[0])
    flipped[flipped.index(b'"hashes":["') + 12] ^= 0x01  # one hex digit of a hash: still well-formed JSON
    data = bytes(flipped) + b"".join(lines[1:])
    table.write_bytes(data[: len(data) - len(lines[-1]) // 2])  # and the last line cut in half
    out = stages.run_frames(cfg, "aist")
    assert _items(work, "aist").equals(before)
    assert out["frame_cache_bad_entries"] == 2 and out["frames_decoded"] == 0
    assert stages.run_frames(cfg, "aist")["frame_cache_bad_entries"] == 0


def test_packs_get_the_mode_a_plain_open_gives(tmp_path):
    """A pack is readable by whoever a plain open() lets (0666 minus the umask), not mkstemp's 0600: a frame cache
    can be shared."""
    old = os.umask(0o022)
    try:
        cache = FrameCache(tmp_path)
        imgs = _video(cache, "u1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.pack_path(next(iter(imgs))).stat().st_mode) == 0o644
