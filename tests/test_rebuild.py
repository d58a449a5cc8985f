"""Skipping what is unchanged: a rebuild with nothing changed plans no step; a changed task template recomputes only
the candidates onward, and inside the candidates step only that family; a lost or edited output, or a changed
upstream corpus, recomputes its step and what follows. The release step writes its checksums once."""

from __future__ import annotations

import shutil

from assets.run import BuildSettings, plan

SLUGS = ["gm100", "rh20t", "reassemble", "aist"]


def _settings(samples, work, release, config_dir=""):
    return BuildSettings(
        config_dir=str(config_dir),
        scale="demo",
        upstream={k: str(v) for k, v in samples.items()},
        work_dir=str(work),
        release_dir=str(release),
    )


def test_nothing_changed_plans_no_step(demo_samples, demo_release):
    assert plan(_settings(demo_samples, demo_release.parent / "work", demo_release)) == []


def test_one_template_change_recomputes_only_candidates_onward(demo_samples, demo_release, tmp_path):
    from assets.fingerprint import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("is the NOW frame?", "is the NOW image?"))
    steps = plan(_settings(demo_samples, demo_release.parent / "work", demo_release, configs))
    assert not [s for s in steps if s.startswith(("ingest_", "labels_"))]
    from pipeline.settings.config import load_settings

    fed = load_settings(configs).tasks["T5"].sources  # a source T5 does not list keeps its chain
    assert set(fed) < set(SLUGS)
    assert {f"candidates_{s}" for s in fed} | {f"items_{s}" for s in fed} | {"split", "steps", "release"} == set(steps)


def test_a_lost_output_or_a_changed_corpus_recomputes_that_step_onward(demo_samples, demo_release, tmp_path):
    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    shutil.copytree(demo_release, release)
    settings = _settings(demo_samples, work, release)
    assert plan(settings) == []
    (work / "labels" / "aist" / "arms.parquet").unlink()
    assert plan(settings) == ["labels_aist", "candidates_aist", "items_aist", "split", "steps", "release"]
    shutil.copytree(demo_release.parent / "work" / "labels", work / "labels", dirs_exist_ok=True)
    (release / "metadata" / "schema.md").write_text("edited\n")
    assert plan(settings) == ["release"]
    shutil.copy(demo_release / "metadata" / "schema.md", release / "metadata" / "schema.md")
    corpus = tmp_path / "rh20t"
    shutil.copytree(demo_samples["rh20t"], corpus)
    (corpus / "extra_file.txt").write_text("new upstream file\n")
    moved = _settings({**demo_samples, "rh20t": corpus}, work, release)
    assert plan(moved)[0] == "ingest_rh20t" and not [s for s in plan(moved) if s.endswith(("_gm100", "_aist"))]


def test_one_template_edit_generates_only_that_family(demo_samples, demo_release, tmp_path, monkeypatch):
    """Each family's part of a pool is kept under its own key: after a T5 edit the candidates step generates T5
    only, leaves the other families' parts untouched, and writes the pool a full generation writes."""
    import polars as pl

    from assets.fingerprint import REPO
    from pipeline import families, stages

    slug = "gm100"
    work = tmp_path / "work"
    shutil.copytree(
        demo_release.parent / "work",
        work,
        ignore=shutil.ignore_patterns("frame_cache", "items", "split", "_fingerprints"),
    )
    calls = []
    for t, fn in list(families.GENERATORS.items()):
        monkeypatch.setitem(families.GENERATORS, t, lambda spec, ctx, _fn=fn, _t=t: calls.append(_t) or _fn(spec, ctx))
    memo, pool_file = work / "candidates" / slug, work / "candidates" / f"{slug}.parquet"
    before = {p.name: p.stat().st_mtime_ns for p in memo.glob("*.parquet")}
    pool_bytes = pool_file.read_bytes()
    cfg = _settings(demo_samples, work, tmp_path / "release").config()
    assert sorted(n.split(".")[0] for n in before) == sorted(families.enabled_families(cfg, slug))
    # nothing changed: every family read back, the same pool bytes
    assert stages.run_candidates(cfg, slug)["families_generated"] == [] and calls == []
    assert pool_file.read_bytes() == pool_bytes

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("is the NOW frame?", "is the NOW image?"))
    cfg5 = _settings(demo_samples, work, tmp_path / "release", configs).config()
    assert stages.run_candidates(cfg5, slug)["families_generated"] == ["T5"] and calls == ["T5"]
    after = {p.name: p.stat().st_mtime_ns for p in memo.glob("*.parquet")}
    others = lambda d: {n: m for n, m in d.items() if not n.startswith("T5.")}
    assert others(after) == others(before)  # the other families' parts: not rewritten
    assert len(set(after) - set(before)) == 1 and len(after) == len(before)  # T5's new part replaced its old one
    fresh = families.build_candidates(slug, stages.load_ir(cfg5, slug), stages.load_labels(cfg5, slug), cfg5)
    assert pl.read_parquet(pool_file).equals(fresh) and pool_file.read_bytes() != pool_bytes

    # planted: a labels threshold feeds every family, so a key without it would reuse stale parts
    calls.clear()
    cfg5 = cfg5.with_values({f"labels.speed.{slug}.span": cfg5.labels.speed.for_source(slug).span + 2})
    assert stages.run_candidates(cfg5, slug)["families_generated"] == families.enabled_families(cfg5, slug)
    assert calls == families.enabled_families(cfg5, slug)


def test_a_question_edit_keeps_the_items_selection(demo_samples, demo_release, tmp_path):
    """After a T5 question edit the items step takes the last selection with the new question text, and gives the
    items a full run gives; a change the selection depends on (a quota), or a missing selection key, selects again."""
    import polars as pl

    from assets.fingerprint import REPO
    from pipeline import stages

    slug = "gm100"
    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("is the NOW frame?", "is the NOW image?"))
    work, fresh_work = tmp_path / "work", tmp_path / "fresh"
    for w in (work, fresh_work):
        shutil.copytree(demo_release.parent / "work", w, ignore=shutil.ignore_patterns("split", "_fingerprints"))
    cfg5, fresh5 = (_settings(demo_samples, w, tmp_path / "release", configs).config() for w in (work, fresh_work))
    for c in (cfg5, fresh5):
        stages.run_candidates(c, slug)
    (fresh_work / "items" / f"{slug}.selection_key").unlink()  # no key: a full selection
    assert stages.run_frames(fresh5, slug)["selection_reused"] is False
    summary = stages.run_frames(cfg5, slug)
    assert summary["selection_reused"] is True and summary["frames_decoded"] == 0
    items = pl.read_parquet(work / "items" / f"{slug}.parquet")
    assert items.equals(pl.read_parquet(fresh_work / "items" / f"{slug}.parquet"))
    t5_items = items.filter(pl.col("task_id") == "T5")
    assert t5_items.height and t5_items["question"].str.contains("is the NOW image?", literal=True).all()

    # planted: a quota is part of what the selection depends on
    cfg5 = cfg5.with_values({f"tasks.T5.quota.{slug}": cfg5.tasks["T5"].quota[slug] + 500})
    assert stages.run_frames(cfg5, slug)["selection_reused"] is False


def test_the_release_step_writes_its_checksums_once(demo_samples, demo_release, tmp_path, monkeypatch):
    """Writers, exports and the validity report all land before checksums.sha256, which is written once, last; the
    rerun gives the demo release's bytes."""
    from pipeline import stages
    from pipeline.release import writers

    release = tmp_path / "release"
    shutil.copytree(demo_release, release)
    cfg = _settings(demo_samples, demo_release.parent / "work", release).config()
    calls, real = [], writers.write_checksums
    monkeypatch.setattr(writers, "write_checksums", lambda out, c, **kw: calls.append(out) or real(out, c, **kw))
    stages.run_release(cfg)
    assert len(calls) == 1
    tree = lambda root: {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert tree(release) == tree(demo_release)


OTHER_VALUE = {
    "work_dir": "edited",
    "release_dir": "edited",
    "executor": {"engine": "dask", "max_concurrent": 3},
    "root": "/edited",
    "ingest_shards": 7,
    "workers": 5,
    "max_file_bytes": 1 << 20,
}  # a valid value of each NO_OUTPUT_KEYS key


def test_keys_that_change_no_output_change_no_fingerprint_and_no_config_hash():
    """One list (pipeline/core/digests.py NO_OUTPUT_KEYS) for the steps' fingerprints and the release's config hash: each
    of its keys edited leaves both as they were; a key that changes output (planted: the release seed) changes both."""
    from assets.tables import all_steps
    from pipeline.settings.config import load_settings
    from pipeline.core.digests import NO_OUTPUT_KEYS, config_part, digest
    from pipeline.release.provenance import config_hash

    cfg = load_settings(scale="demo")
    steps = all_steps(cfg)
    # the config part of each step's fingerprint (assets/fingerprint.py; a root's content is listed apart from it)
    prints = lambda c: {s.name: digest(config_part(c, s.config)) for s in steps}
    base = prints(cfg), config_hash(cfg)
    for section, keys in NO_OUTPUT_KEYS.items():
        for key in keys:
            paths = [f"sources.{s}.{key}" for s in cfg.sources] if section == "sources" else [f"{section}.{key}"]
            edited = cfg.with_values({p: OTHER_VALUE[key] for p in paths})
            assert (prints(edited), config_hash(edited)) == base, f"{section}.{key}"
    planted = cfg.with_values({"build.release_seed": cfg.build.release_seed + 1})
    assert config_hash(planted) != base[1]
    assert [n for n, fp in prints(planted).items() if fp == base[0][n]] == [
        s.name for s in steps if s.name.startswith("ingest_")
    ]


def test_a_max_concurrent_edit_plans_no_step(demo_samples, demo_release, tmp_path):
    """How many steps run at a time changes no output: after the build, editing build.executor.max_concurrent (or
    the engine) plans no step."""
    from assets.fingerprint import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    build = configs / "build.yaml"
    text = build.read_text()
    assert "max_concurrent: 0 " in text and "engine: multiprocess " in text
    build.write_text(
        text.replace("max_concurrent: 0 ", "max_concurrent: 3 ").replace("engine: multiprocess ", "engine: in_process ")
    )
    edited = _settings(demo_samples, demo_release.parent / "work", demo_release, configs)
    assert edited.config().build.executor.max_concurrent == 3
    assert plan(edited) == []
