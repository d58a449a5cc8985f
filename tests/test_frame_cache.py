"""The frame cache proves its entries (issue 14, item 2): a video changed under the same unit id gets new image hashes
on a warm rebuild (keys carry the unit's upstream fingerprint, and the items step re-runs on an upstream change); a
swapped, truncated, undecodable or header-less entry, or a swapped render memo, is detected, never used, decoded or
rendered again, and the stage ends with the same items as before."""

from __future__ import annotations

import json
import random
import shutil
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import polars as pl

from assets.fingerprint import run_step
from assets.tables import source_steps, tables_by_name
from pipeline import stages
from pipeline.config import load_config
from pipeline.frames import memos
from pipeline.frames.cache import FrameCache, png_with_meta, meta_of_png_head
from pipeline.frames.pixels import decode_png, encode_png
from upstream_adapters import get_adapter, video
from upstream_adapters.samples.common import encode_video


def _cfg(samples: dict, work: Path) -> dict:
    cfg = load_config(upstream={k: str(v) for k, v in samples.items()}, scale="demo")
    cfg["build"]["work_dir"] = str(work)
    cfg["frames"]["workers"] = 1  # in-process: small demo work, and the counters are this process's
    return cfg


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
    files = get_adapter("gm100", **cfg["sources"]["gm100"]["adapter"]).unit_files(samples["gm100"], victim)
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


def _corrupt(path: Path, how: str, other: Path) -> None:
    data = path.read_bytes()
    if how == "swapped":  # another entry's whole file under this key
        shutil.copyfile(other, path)
    elif how == "pixels_swapped":  # this entry's header, another frame's pixels
        meta = meta_of_png_head(data)
        path.write_bytes(png_with_meta(encode_png(np.ascontiguousarray(255 - decode_png(data)), 1), meta))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "bit_flips":  # header intact, compressed pixels damaged
        b = bytearray(data)
        for i in range(len(b) // 2, len(b) - 16, 97):
            b[i] ^= 0x5A
        path.write_bytes(bytes(b))
    elif how == "no_header":  # a plain PNG of the right pixels
        path.write_bytes(encode_png(decode_png(data), 1))
    elif how == "empty":
        path.write_bytes(b"")
    else:
        raise ValueError(how)


CORRUPTIONS = ["swapped", "pixels_swapped", "truncated", "bit_flips", "no_header", "empty"]


def test_bad_cache_entries_are_detected_and_decoded_again(demo_samples, demo_release, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work)
    cfg = _cfg(demo_samples, work)
    slugs = cfg["build"]["sources"]
    before = {s: _items(work, s) for s in slugs}
    pngs = sorted((work / "frame_cache" / "frames").rglob("*.png"))
    picked = random.Random(14).sample(pngs, 2 * len(CORRUPTIONS))
    for n, how in enumerate(CORRUPTIONS):  # two entries per kind
        for path in picked[2 * n: 2 * n + 2]:
            _corrupt(path, how, other=pngs[(pngs.index(path) + 1) % len(pngs)])
    # render memos gone, so the frames' pixels are read again (the path where a bad entry reached the release); no
    # selection key, so each items step selects and renders again rather than keeping its last items
    shutil.rmtree(work / "frame_cache" / "renders")
    for slug in slugs:
        _select_again(work, slug)
    outs = {s: stages.run_frames(cfg, s) for s in slugs}  # never fatal
    differ = [s for s in slugs if not _items(work, s).equals(before[s])]
    assert not differ, f"items differ after cache corruption: {differ}"
    decoded = sum(out["frames_decoded"] for out in outs.values())
    bad = sum(out["frame_cache_bad_entries"] for out in outs.values())
    assert bad == len(picked), f"{bad} of {len(picked)} corrupted entries detected"
    assert decoded == len(picked)
    cache = FrameCache.from_config(cfg)
    for path in picked:  # rewritten, and good again
        assert cache.lookup(path.stem) is not None


def _select_again(work: Path, slug: str) -> None:
    """Without its selection key the items step selects and renders again instead of keeping its last items."""
    (work / "items" / f"{slug}.selection_key").unlink(missing_ok=True)


def _memo_lines(work: Path) -> dict[Path, list[bytes]]:
    return {t: t.read_bytes().splitlines(keepends=True)
            for t in sorted((work / "frame_cache" / "renders").glob("*" + memos.SUFFIX))}


def _aist_memo_table(demo_samples, demo_release, tmp_path):
    """A copy of the demo work folder whose render memos were made again by AIST's items step alone: (work, cfg, AIST
    items before, the one memo table, its lines)."""
    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work)
    cfg = _cfg(demo_samples, work)
    before = _items(work, "aist")
    shutil.rmtree(work / "frame_cache" / "renders")
    _select_again(work, "aist")
    stages.run_frames(cfg, "aist")  # renders/ now holds exactly aist's memos, in one table
    (table, lines), = _memo_lines(work).items()
    return work, cfg, before, table, lines


def test_bad_render_memos_are_rendered_again(demo_samples, demo_release, tmp_path):
    work, cfg, before, table, lines = _aist_memo_table(demo_samples, demo_release, tmp_path)
    a, b, c = random.Random(3).sample(range(len(lines)), 3)
    key_a, key_c = json.loads(lines[a])["key"], json.loads(lines[c])["key"]
    memo_a = json.loads(lines[a])
    lines[a] = json.dumps({**memo_a, "hashes": json.loads(lines[b])["hashes"]}).encode() + b"\n"  # b's under a's key
    lines[c] = memos.memo_line(key_c, ["0" * 64] * 99)  # well-formed, wrong number of images for its item
    table.write_bytes(b"".join(lines))
    _select_again(work, "aist")
    out = stages.run_frames(cfg, "aist")
    assert _items(work, "aist").equals(before)
    assert out["frame_cache_bad_entries"] == 2 and out["frames_decoded"] == 0
    # both were rendered again and the bad lines are gone: a third run meets no bad memo
    kept = [json.loads(line) for lines in _memo_lines(work).values() for line in lines]
    assert [m["hashes"] for m in kept if m["key"] == key_a] == [memo_a["hashes"]]
    (memo_c,) = [m for m in kept if m["key"] == key_c]  # the replaced memo is gone from its old table
    assert len(memo_c["hashes"]) != 99
    _select_again(work, "aist")
    assert stages.run_frames(cfg, "aist")["frame_cache_bad_entries"] == 0


def test_a_cut_or_damaged_memo_table_is_detected_and_rendered_again(demo_samples, demo_release, tmp_path):
    """Tables are written atomically, but a table cut or damaged afterwards (a full disk, a bad copy) must not be
    trusted line by line: a cut line and a flipped byte are both detected, the rest of the table is still used."""
    work, cfg, before, table, lines = _aist_memo_table(demo_samples, demo_release, tmp_path)
    flipped = bytearray(lines[0])
    flipped[flipped.index(b'"hashes":["') + 12] ^= 0x01  # one hex digit of a hash: still well-formed JSON
    data = bytes(flipped) + b"".join(lines[1:])
    table.write_bytes(data[: len(data) - len(lines[-1]) // 2])  # and the last line cut in half
    _select_again(work, "aist")
    out = stages.run_frames(cfg, "aist")
    assert _items(work, "aist").equals(before)
    assert out["frame_cache_bad_entries"] == 2 and out["frames_decoded"] == 0
    _select_again(work, "aist")
    assert stages.run_frames(cfg, "aist")["frame_cache_bad_entries"] == 0
