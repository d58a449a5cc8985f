"""Skipping what is unchanged: a rebuild with nothing changed plans no step; a changed task template recomputes only
the candidates onward; a lost or edited output, or a changed upstream corpus, recomputes its step and what follows."""

from __future__ import annotations

import shutil

from assets.run import plan, settings_from

SLUGS = ["gm100", "rh20t", "reassemble", "aist"]


def _settings(samples, work, release, config_dir=""):
    return settings_from(config_dir=str(config_dir), scale="demo", upstream={k: str(v) for k, v in samples.items()},
                         work_dir=str(work), release_dir=str(release))


def test_nothing_changed_plans_no_step(demo_samples, demo_release):
    assert plan(_settings(demo_samples, demo_release.parent / "work", demo_release)) == []


def test_one_template_change_recomputes_only_candidates_onward(demo_samples, demo_release, tmp_path):
    from assets.fingerprint import REPO

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    t5 = configs / "tasks" / "T5.yaml"
    t5.write_text(t5.read_text().replace("how far along is the current", "how far along is this"))
    steps = plan(_settings(demo_samples, demo_release.parent / "work", demo_release, configs))
    assert not [s for s in steps if s.startswith(("ingest_", "labels_"))]
    assert {f"candidates_{s}" for s in SLUGS} | {f"items_{s}" for s in SLUGS} | {"split", "release"} == set(steps)


def test_a_lost_output_or_a_changed_corpus_recomputes_that_step_onward(demo_samples, demo_release, tmp_path):
    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache"))
    shutil.copytree(demo_release, release)
    settings = _settings(demo_samples, work, release)
    assert plan(settings) == []
    (work / "labels" / "aist" / "arms.parquet").unlink()
    assert plan(settings) == ["labels_aist", "candidates_aist", "items_aist", "split", "release"]
    shutil.copytree(demo_release.parent / "work" / "labels", work / "labels", dirs_exist_ok=True)
    (release / "metadata" / "schema.md").write_text("edited\n")
    assert plan(settings) == ["release"]
    shutil.copy(demo_release / "metadata" / "schema.md", release / "metadata" / "schema.md")
    corpus = tmp_path / "rh20t"
    shutil.copytree(demo_samples["rh20t"], corpus)
    (corpus / "extra_file.txt").write_text("new upstream file\n")
    moved = _settings({**demo_samples, "rh20t": corpus}, work, release)
    assert plan(moved)[0] == "ingest_rh20t" and not [s for s in plan(moved) if s.endswith(("_gm100", "_aist"))]
