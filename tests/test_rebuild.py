"""Skipping what is unchanged: a rebuild with nothing changed plans no step; a changed task template recomputes only
the candidates onward, and inside the candidates step only that family; a lost or edited output, or a changed
upstream corpus, recomputes its step and what follows. The release step writes its checksums once."""

from __future__ import annotations

import shutil

from assets.run import plan
from assets.settings import BuildSettings

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


def _edit_template(configs, task: str, edit) -> None:
    """Edit a template through its parsed YAML (`edit(template dict)`); a no-op edit is refused."""
    import yaml

    path = configs / "tasks" / f"{task}.yaml"
    before = yaml.safe_load(path.read_text())
    after = yaml.safe_load(path.read_text())
    edit(after)
    assert after != before, f"{task}: the edit changed nothing"
    path.write_text(yaml.safe_dump(after, sort_keys=False, allow_unicode=True))


def _configs(tmp_path):
    from assets.fingerprint import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    return configs


def test_one_template_change_recomputes_only_candidates_onward(demo_samples, demo_release, tmp_path):
    """A template field the candidates read (planted: T5's minimum gap between GM-100 items) re-runs the candidates
    and items of the sources the template lists, then split, steps and release; never ingest or labels."""
    configs = _configs(tmp_path)
    _edit_template(configs, "T5", lambda t: t["min_gap"].update(gm100=t["min_gap"]["gm100"] + 1))
    steps = plan(_settings(demo_samples, demo_release.parent / "work", demo_release, configs))
    assert not [s for s in steps if s.startswith(("ingest_", "labels_"))]
    from pipeline.settings.config import load_settings

    fed = load_settings(configs).tasks["T5"].sources  # a source T5 does not list keeps its chain
    assert set(fed) < set(SLUGS)
    assert {f"candidates_{s}" for s in fed} | {f"items_{s}" for s in fed} | {"split", "steps", "release"} == set(steps)


def test_a_question_edit_runs_the_release_step_alone(demo_samples, demo_release, tmp_path):
    """The questions' text is made by the release step from the templates (the steps before it carry each question's
    fields): a question edit plans the release alone, whose questions then carry the new text, T5's only."""
    import polars as pl

    from pipeline.release.prompts import question_texts

    configs = _configs(tmp_path)
    _edit_template(configs, "T5", lambda t: t["question"].update(default=t["question"]["default"] + " Planted."))
    edited = _settings(demo_samples, demo_release.parent / "work", demo_release, configs)
    assert plan(edited) == ["release"]
    items = pl.read_parquet(demo_release.parent / "work" / "split" / "items.parquet")
    old, new = question_texts(items, _settings(demo_samples, "", "").config()), question_texts(items, edited.config())
    t5 = (items["task_id"] == "T5").to_list()
    assert t5.count(True) and all((b == a + " Planted.") if f else (b == a) for a, b, f in zip(old, new, t5))
    released = pl.concat(
        [
            pl.read_parquet(p, columns=["question"])
            for p in (demo_release / "splits").glob("*.parquet")
            if "question" in pl.read_parquet_schema(p) and "num_steps" not in pl.read_parquet_schema(p)
        ]
    )
    assert set(released["question"]) == set(old)  # the release's questions are the ones made here


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
    from assets.tables import QUESTION_TEXT
    from pipeline import families, stages
    from pipeline.core.digests import hidden_view

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
    # the view of the settings the build runs the candidates step with (its `hides`: the questions' text)
    as_built = lambda c: hidden_view(c, QUESTION_TEXT)
    cfg = as_built(_settings(demo_samples, work, tmp_path / "release").config())
    assert sorted(n.split(".")[0] for n in before) == sorted(families.enabled_families(cfg, slug))
    # nothing changed: every family read back, the same pool bytes
    assert stages.run_candidates(cfg, slug)["families_generated"] == [] and calls == []
    assert pool_file.read_bytes() == pool_bytes

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    stride = lambda t: t["candidates"]["stride"].update(gm100=t["candidates"]["stride"]["gm100"] + 1)
    _edit_template(configs, "T5", stride)  # a field the candidates read: T5's part is made again
    cfg5 = as_built(_settings(demo_samples, work, tmp_path / "release", configs).config())
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


def test_a_step_does_not_see_what_its_fingerprint_leaves_out(demo_samples, demo_release, tmp_path):
    """`Step.hides` leaves keys out of a step's fingerprint and hides them from the step when it runs: a step that
    reads a hidden key anyway (planted: a copy of the candidates step that formats T5's question) fails instead of
    going stale, the registered one runs on the hidden view, and a hidden key that names nothing is refused."""
    import dataclasses

    import pytest

    from assets import fingerprint
    from assets.tables import all_steps, tables_by_name
    from pipeline.core.digests import HIDDEN, hidden_keys

    work = tmp_path / "work"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache", "items", "split"))
    cfg = _settings(demo_samples, work, tmp_path / "release").config()
    steps = all_steps(cfg)
    step = next(s for s in steps if s.name == "candidates_aist")
    assert "tasks.*.question" in step.hides
    seen = []
    reader = dataclasses.replace(step, run=lambda c: seen.append(c.tasks["T1"].question) or step.run(c))
    fingerprint.forget(step, cfg)
    fingerprint.run_step(reader, cfg, tables_by_name(steps))
    assert seen == [HIDDEN]
    planted = dataclasses.replace(step, run=lambda c: c.tasks["T5"].question.format(step="a step"))
    fingerprint.forget(step, cfg)
    with pytest.raises(KeyError, match="not read by this step"):
        fingerprint.run_step(planted, cfg, tables_by_name(steps))
    with pytest.raises(KeyError, match="tasks.\\*.questoin"):
        hidden_keys(cfg.model_dump(), ("tasks.*.questoin",))


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
    from pipeline.publish.provenance import config_hash

    cfg = load_settings(scale="demo")
    steps = all_steps(cfg)
    # the config part of each step's fingerprint (assets/fingerprint.py; a root's content is listed apart from it)
    prints = lambda c: {s.name: digest(config_part(c, s.config, s.hides)) for s in steps}
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
