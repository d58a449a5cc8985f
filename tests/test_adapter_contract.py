"""The adapter contract (upstream_adapters/base.py), checked once for every adapter of the registry on its demo
corpus: the per-adapter test files only test what is specific to a source's format."""

from __future__ import annotations

import inspect
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.settings.config import load_settings
from upstream_adapters import ADAPTERS, get_adapter
from upstream_adapters.base import SourceAdapter
from upstream_adapters.ir import UnitError, validate_unit

SLUGS = sorted(ADAPTERS)


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture(params=SLUGS)
def slug(request):
    return request.param


@pytest.fixture
def adapter(cfg, slug) -> SourceAdapter:
    return get_adapter(slug, **cfg.sources[slug].adapter.options())


@pytest.fixture
def root(demo_samples, slug) -> Path:
    return demo_samples[slug]


@pytest.fixture
def copy(root, tmp_path) -> Path:
    """A writable copy of the demo corpus (plain files, no links)."""
    dst = tmp_path / "copy"
    shutil.copytree(root, dst)
    return dst


def first_good(adapter, root) -> tuple[str, dict]:
    for unit_id in adapter.discover(root):
        try:
            ir = adapter.read_unit(root, unit_id)
        except UnitError:
            continue
        assert validate_unit(ir) is None
        return unit_id, ir.unit
    raise AssertionError("no readable unit in the demo corpus")


def test_is_a_source_adapter_with_documented_options(adapter, cfg, slug):
    assert isinstance(adapter, SourceAdapter)
    assert adapter.slug == slug
    assert adapter.name == cfg.sources[slug].name
    assert adapter.unit_type == cfg.sources[slug].unit_type
    params = [p for p in inspect.signature(type(adapter).__init__).parameters if p != "self"]
    assert sorted(params) == sorted(adapter.options), "every constructor option is documented in `options`"
    assert all(isinstance(v, str) and v for v in adapter.options.values())


def test_discover_is_sorted_and_deterministic(adapter, cfg, slug, root):
    ids = adapter.discover(root)
    assert ids and ids == sorted(ids) and len(set(ids)) == len(ids)
    assert adapter.discover(root) == ids
    assert get_adapter(slug, **cfg.sources[slug].adapter.options()).discover(root) == ids
    assert isinstance(adapter.issues, list)


def test_unit_ids_that_escape_the_root_are_refused(adapter, root, tmp_path):
    good, unit = first_good(adapter, root)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bad_ids = [
        "",
        ".",
        "..",
        f"../{good}",
        f"{good}/../{good}",
        "/etc/passwd",
        str(Path(root) / good),
        str(outside),
        f"..__{good}",
        f"{good}\\..\\{good}",
    ]
    for bad in bad_ids:
        with pytest.raises(UnitError):
            adapter.read_unit(root, bad)
        with pytest.raises(UnitError):
            adapter.read_frames(root, bad, unit["camera"], [0])
        with pytest.raises(UnitError):
            adapter.fingerprint(root, bad)


def test_read_frames_returns_exactly_the_requested_indices(adapter, root):
    good, unit = first_good(adapter, root)
    n = unit["num_frames"]
    want = [n - 1, 0, n // 2, 0]
    got = adapter.read_frames(root, good, unit["camera"], want)
    assert sorted(got) == sorted(set(want))
    for img in got.values():
        assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert adapter.read_frames(root, good, unit["camera"], []) == {}
    again = adapter.read_frames(root, good, unit["camera"], [n // 2], decoder="pyav", threads=1)
    assert np.array_equal(again[n // 2], got[n // 2])
    with pytest.raises(UnitError):
        adapter.read_frames(root, good, unit["camera"], [n + 1000])


def test_picklable_for_worker_processes(adapter, root):
    good, unit = first_good(adapter, root)  # fills the adapter's caches and indexes first
    clone = pickle.loads(pickle.dumps(adapter))
    assert type(clone) is type(adapter)
    assert clone.discover(root) == adapter.discover(root)
    a = adapter.read_frames(root, good, unit["camera"], [0])
    b = clone.read_frames(root, good, unit["camera"], [0])
    assert np.array_equal(a[0], b[0])
    assert clone.read_unit(root, good).unit == adapter.read_unit(root, good).unit


def test_fingerprint_is_stable_path_free_and_follows_content(adapter, cfg, slug, root, copy):
    good, _ = first_good(adapter, root)
    fp = adapter.fingerprint(root, good)
    assert isinstance(fp, str) and len(fp) >= 16
    assert adapter.fingerprint(root, good) == fp
    assert get_adapter(slug, **cfg.sources[slug].adapter.options()).fingerprint(copy, good) == fp
    others = [u for u in adapter.discover(root) if u != good]
    if others:
        try:
            assert adapter.fingerprint(root, others[0]) != fp
        except UnitError:
            pass  # a planted broken unit of the demo corpus
    # change one byte near the end of a file the unit is read from: the fingerprint must change
    _, path, _ = adapter.unit_files(copy, good)[-1]
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    fresh = get_adapter(slug, **cfg.sources[slug].adapter.options())
    try:
        assert fresh.fingerprint(copy, good) != fp
    except UnitError:
        pass  # the flipped byte broke an archive's checksum: the unit is refused, never fingerprinted as before


def hf_snapshot(src: Path, cache: Path, repo: str = "datasets--org--corpus", rev: str = "0" * 40) -> Path:
    """Lay `src` out as a huggingface_hub cache snapshot: every file stored once under `blobs/<sha256>` and linked from
    `snapshots/<rev>/<path>` by a relative symlink (`../../blobs/<sha>`, one more `../` per folder level), plus
    `refs/main` naming the revision, as `huggingface-cli download` leaves it."""
    import hashlib
    import os

    base = cache / repo
    (base / "blobs").mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    snap = base / "snapshots" / rev
    for path in sorted(p for p in Path(src).rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        data = path.read_bytes()
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return snap


def test_a_hugging_face_cache_snapshot_reads_exactly_like_a_plain_copy(adapter, cfg, slug, root, tmp_path):
    snap = hf_snapshot(root, tmp_path / "hub")
    assert all(p.is_symlink() for p in snap.rglob("*") if not p.is_dir())
    fresh = get_adapter(slug, **cfg.sources[slug].adapter.options())
    ids = adapter.discover(root)
    assert fresh.discover(snap) == ids
    good = None
    for unit_id in ids:
        try:
            a = adapter.read_unit(root, unit_id)
        except UnitError as exc:
            with pytest.raises(UnitError) as b:
                fresh.read_unit(snap, unit_id)
            assert (b.value.reason, b.value.file) == (exc.reason, exc.file)
            continue
        b = fresh.read_unit(snap, unit_id)
        assert b.unit == a.unit and b.notes == a.notes
        for name in ("frames", "signals", "segments"):
            assert getattr(b, name).equals(getattr(a, name)), (unit_id, name)
        good = good or (unit_id, a.unit)
    unit_id, unit = good
    want = [0, unit["num_frames"] - 1]
    x = adapter.read_frames(root, unit_id, unit["camera"], want)
    y = fresh.read_frames(snap, unit_id, unit["camera"], want)
    assert all(np.array_equal(x[i], y[i]) for i in want)
    assert fresh.fingerprint(snap, unit_id) == adapter.fingerprint(root, unit_id)
