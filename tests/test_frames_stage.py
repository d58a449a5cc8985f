"""The frames stage as the build runs it: the cache makes a rebuild decode nothing, the visual gate drops items whose
frames are unusable and the selection replaces them, and researchers can reconstruct every item's images."""

from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl

from pipeline import stages
from assets.cli import main
from pipeline.settings.config import load_settings
from pipeline.reconstruct import release_item_files
from pipeline.release.files import step_files


def _cfg(samples, work, release=None):
    cfg = load_settings(upstream={k: str(v) for k, v in samples.items()}, scale="demo")
    return cfg.with_values({"build.work_dir": str(work), **({"build.release_dir": str(release)} if release else {})})


def test_rebuild_decodes_zero_frames(demo_samples, demo_release, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work)
    cfg = _cfg(demo_samples, work)
    for slug in cfg.build.sources:
        before = pl.read_parquet(work / "items" / f"{slug}.parquet")
        out = stages.run_frames(cfg, slug)
        assert out["frames_decoded"] == 0, slug
        assert out["frames_cached"] > 0
        assert pl.read_parquet(work / "items" / f"{slug}.parquet").equals(before)


def test_gate_drops_black_frames_and_replaces_them(demo_samples, demo_release, tmp_path, monkeypatch):
    from upstream_adapters.gm100.adapter import Gm100Adapter

    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    cfg = _cfg(demo_samples, work).with_values(
        {"frames.workers": 1}
    )  # in-process, so the patched adapter is the one that reads
    before = pl.read_parquet(work / "items" / "gm100.parquet")
    victim = before["unit_id"].value_counts(sort=True)["unit_id"][0]
    real = Gm100Adapter.read_frames

    def black_for_victim(self, root, unit_id, camera, indices, **decoding):
        frames = real(self, root, unit_id, camera, indices, **decoding)
        return {i: np.zeros_like(f) for i, f in frames.items()} if unit_id == victim else frames

    monkeypatch.setattr(Gm100Adapter, "read_frames", black_for_victim)
    out = stages.run_frames(cfg, "gm100")
    after = pl.read_parquet(work / "items" / "gm100.parquet")
    q = pl.read_parquet(work / "items" / "gm100_quarantine.parquet")
    assert victim not in after["unit_id"].to_list()
    assert q.height > 0 and set(q["unit_id"]) == {victim} and all("black" in r for r in q["reason"])
    assert set(q["stage"]) == {"frames"}
    # replacements: each family keeps its count unless the pool ran out (then the shortfall says so)
    short = {s["task_id"]: s["missing"] for s in out["shortfall"]}
    got = dict(after.group_by("task_id").len().iter_rows())
    for task, n in before.group_by("task_id").len().iter_rows():
        assert got.get(task, 0) + short.get(task, 0) >= n


def test_reconstruct_from_upstream_matches_every_hash(demo_samples, demo_release, tmp_path, capsys):
    args = ["reconstruct", "--release", str(demo_release), "--out", str(tmp_path / "recon")]
    for slug, root in demo_samples.items():
        args += ["--upstream", f"{slug}={root}"]
    assert main(args) == 0
    cfg = load_settings(scale="demo")
    files = release_item_files(demo_release, cfg)  # every eval level, then SFT
    assert len(files) == 4 and all((demo_release / f).is_file() for f in files)
    steps = step_files(cfg, demo_release)  # the T13 step items: their images are reconstructed too
    files += [pq for pq, _ in steps.values()]
    tables = {f: pl.read_parquet(demo_release / f) for f in files}
    rows = pl.concat([df.select("source_slug", "image_hashes_json") for df in tables.values()])
    saved = json.loads((tmp_path / "recon" / "reconstruction_report.json").read_text())
    report = saved["sources"]
    for slug, n in rows.group_by("source_slug").len().iter_rows():
        assert report[slug]["items"] == report[slug]["ok"] == n, (slug, report[slug])
    assert {f: (r["items"], r["ok"]) for f, r in saved["files"].items()} == {
        f: (df.height, df.height) for f, df in tables.items()
    }
    out = capsys.readouterr().out
    assert all(f"  {f}" in out for f in files) and str((tmp_path / "recon" / "images").resolve()) in out
    n_images = sum(len(json.loads(h)) for h in rows["image_hashes_json"])
    assert len(list((tmp_path / "recon" / "images").glob("*.png"))) == n_images
