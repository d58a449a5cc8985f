"""Fingerprints that see content (upstream_adapters/content_hash.py): an edit in the middle of an upstream file that
keeps its size and its mtime changes the unit's fingerprint and the ingest listing; a touch or a copy re-reads the file
but changes nothing; the store survives the process, ignores its damaged lines, never keeps a file written a moment
ago, and `verify` reads every file again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from upstream_adapters import content_hash


@pytest.fixture(autouse=True)
def _own_store(tmp_path, monkeypatch):
    # a file's ctime is when it was written (nothing sets it back): here every file was written a moment ago, so the
    # racy-file guard is off but for the test of that guard
    monkeypatch.setattr(content_hash, "RACY_S", -1.0)
    content_hash.use_store(tmp_path / "store", verify=False)
    yield
    content_hash.use_store(None, verify=False)


def _old(path: Path, seconds: float = 60.0) -> None:
    """Date the file back, as any file not written during this build is."""
    t = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(t, t))


def _edit_middle(path: Path) -> None:
    """Flip 16 bytes in the middle, then put the size and the mtime back as they were."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(st.st_size // 2)
        chunk = fh.read(16)
        fh.seek(st.st_size // 2)
        fh.write(bytes(b ^ 0xFF for b in chunk))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _reads(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    real = content_hash._hash_file
    monkeypatch.setattr(content_hash, "_hash_file", lambda p: seen.append(Path(p)) or real(p))
    return seen


def test_a_same_size_edit_in_the_middle_with_the_mtime_restored_changes_the_hash(tmp_path, monkeypatch):
    f = tmp_path / "video.bin"
    f.write_bytes(os.urandom(1 << 20))  # 1 MiB: the middle is far from the first and last 64 KiB
    _old(f)
    before = content_hash.content_sha256(f)
    reads = _reads(monkeypatch)
    assert content_hash.content_sha256(f) == before and reads == []  # cached: not read again
    _edit_middle(f)
    after = content_hash.content_sha256(f)
    assert after[0] == before[0] and after[1] != before[1] and reads == [f]


def test_a_touch_reads_again_and_gives_the_same_hash(tmp_path, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 5000)
    _old(f)
    before = content_hash.content_sha256(f)
    reads = _reads(monkeypatch)
    _old(f, 30)
    assert content_hash.content_sha256(f) == before and reads == [f]


def test_the_store_outlives_the_process_and_ignores_damaged_lines(tmp_path, monkeypatch):
    files = [tmp_path / f"{i}.bin" for i in range(3)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * 1000)
        _old(f)
    hashes = [content_hash.content_sha256(f) for f in files]
    content_hash.flush()
    tables = list((tmp_path / "store").glob("*.tsv"))
    assert len(tables) == 1
    content_hash.use_store(None)  # a new process: nothing in memory
    content_hash.use_store(tmp_path / "store")
    reads = _reads(monkeypatch)
    assert [content_hash.content_sha256(f) for f in files] == hashes and reads == []
    # planted: the second line's hash edited (a wrong hash that would be trusted without the line's check)
    lines = tables[0].read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(lines[1].split(" ")[5], "0" * 64)
    tables[0].write_text("".join(lines[:2]) + lines[2][:20])  # and the third cut
    content_hash.use_store(None)
    content_hash.use_store(tmp_path / "store")
    assert [content_hash.content_sha256(f) for f in files] == hashes
    assert sorted(reads) == sorted(files[1:])  # only the damaged lines' files read again


def test_a_file_written_a_moment_ago_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(content_hash, "RACY_S", 2.0)
    f = tmp_path / "fresh.bin"
    f.write_bytes(b"new")
    content_hash.content_sha256(f)
    content_hash.flush()
    assert not list((tmp_path / "store").glob("*.tsv"))
    monkeypatch.setattr(content_hash, "RACY_S", -1.0)  # planted: without the guard it is stored
    content_hash.use_store(None)
    content_hash.use_store(tmp_path / "store")
    content_hash.content_sha256(f)
    content_hash.flush()
    assert list((tmp_path / "store").glob("*.tsv"))


def test_verify_reads_every_file_again_once_and_replaces_the_stored_entry(tmp_path, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"y" * 4000)
    _old(f)
    right = content_hash.content_sha256(f)
    key = content_hash._identity(f.stat())
    content_hash._state["known"][key] = "f" * 64  # planted: a wrong hash under the file's identity
    content_hash._state["new"][key] = "f" * 64
    content_hash.flush()
    content_hash.use_store(None)
    content_hash.use_store(tmp_path / "store")
    assert content_hash.content_sha256(f)[1] == "f" * 64  # trusted without verify: what --verify is for
    reads = _reads(monkeypatch)
    content_hash.use_store(tmp_path / "store", verify=True)
    assert content_hash.content_sha256(f) == right and content_hash.content_sha256(f) == right and reads == [f]
    content_hash.flush()
    content_hash.use_store(None, verify=False)
    content_hash.use_store(tmp_path / "store")
    assert content_hash.content_sha256(f) == right and reads == [f]  # the verified entry replaced the wrong one


def test_the_unit_fingerprint_and_the_ingest_listing_see_a_middle_edit(tmp_path):
    from assets.fingerprint import tree_listing
    from upstream_adapters.base import SourceAdapter

    class OneFile(SourceAdapter):  # the base class's fingerprint over one file per unit
        slug = "demo"

        def discover(self, root):
            return ["u1"]

        def read_unit(self, root, unit_id):
            raise NotImplementedError

        def read_frames(self, root, unit_id, camera, indices, decoder="auto", threads=1):
            raise NotImplementedError

        def unit_files(self, root, unit_id):
            return [("u1/cam.mp4", Path(root) / "u1" / "cam.mp4", None)]

    root = tmp_path / "corpus"
    (root / "u1").mkdir(parents=True)
    video = root / "u1" / "cam.mp4"
    video.write_bytes(os.urandom(1 << 20))
    _old(video)
    adapter = OneFile()
    fp, listing = adapter.fingerprint(root, "u1"), tree_listing(root)
    _edit_middle(video)
    assert adapter.fingerprint(root, "u1") != fp
    assert tree_listing(root) != listing


def _flip_a_frame(h5_path: Path, camera: str, frame_index: int) -> None:
    """Flip bytes inside the coded data of one frame of the camera's MP4 blob, in place: the file keeps its size, its
    first and last 64 KiB, and (put back) its mtime."""
    import io

    import av
    import h5py

    with h5py.File(h5_path, "r") as h5:
        offset, blob = h5[camera].id.get_offset(), bytes(h5[camera][()].tobytes())
    with av.open(io.BytesIO(blob)) as c:
        packets = [p for p in c.demux(c.streams.video[0]) if p.size]
    packets.sort(key=lambda p: p.pts)
    pos, size = packets[frame_index].pos, packets[frame_index].size
    start = offset + pos + size // 2
    st = h5_path.stat()
    assert 1 << 16 < start < st.st_size - (1 << 16)  # where a head/tail fingerprint never looks
    with open(h5_path, "r+b") as fh:
        fh.seek(start)
        chunk = fh.read(min(64, size // 4))
        fh.seek(start)
        fh.write(bytes(b ^ 0x5A for b in chunk))
    os.utime(h5_path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_same_size_edit_inside_an_h5_video_reruns_and_ships_the_new_frames(
    demo_samples, demo_release, tmp_path, monkeypatch
):
    """The issue's case: a video changed in the middle of a REASSEMBLE .h5, size and mtime as they were. The warm build
    re-runs the source's steps and its items show the frames a cold build decodes from the edited file."""
    import shutil

    import dagster as dg
    import polars as pl

    from assets.run import plan, rebuild
    from assets.settings import BuildSettings
    from pipeline import stages

    content_hash.use_store(None)  # the build's own store, in its work folder
    monkeypatch.setattr(content_hash, "RACY_S", 2.0)  # the files copied below are hashed again at each use
    slug = "reassemble"
    corpus, work, release = tmp_path / slug, tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_samples[slug], corpus)
    shutil.copytree(demo_release.parent / "work", work)
    shutil.copytree(demo_release, release)
    settings = BuildSettings(
        scale="demo",
        upstream={**{k: str(v) for k, v in demo_samples.items()}, slug: str(corpus)},
        work_dir=str(work),
        release_dir=str(release),
    )
    assert plan(settings) == []  # a copied corpus: every file read again, the same content, nothing to run
    frames_file = work / "items" / f"{slug}_frames.parquet"
    before = pl.read_parquet(frames_file)
    row = before.filter(pl.col("camera") == "hand").row(0, named=True)
    _flip_a_frame(corpus / "data" / f"{row['unit_id']}.h5", "hand", row["frame_index"])
    steps = plan(settings)
    assert {f"ingest_{slug}", f"items_{slug}", "release"} <= set(steps)
    with dg.DagsterInstance.ephemeral() as instance:
        rebuild(settings, instance=instance, log=lambda m: None, executor="in_process")
    warm = pl.read_parquet(frames_file)
    assert not warm.equals(before)  # the edit shows: another pixel hash, or the frame no longer decodes
    cold_work = tmp_path / "cold"
    shutil.copytree(work, cold_work, ignore=shutil.ignore_patterns("frame_cache", "_content_hashes"))
    cold_cfg = BuildSettings(
        scale="demo", upstream={slug: str(corpus)}, work_dir=str(cold_work), release_dir=str(tmp_path / "cold_release")
    ).config()
    stages.run_frames(cold_cfg, slug)
    assert pl.read_parquet(cold_work / "items" / f"{slug}_frames.parquet").equals(warm)
    assert pl.read_parquet(cold_work / "items" / f"{slug}.parquet").equals(
        pl.read_parquet(work / "items" / f"{slug}.parquet")
    )
