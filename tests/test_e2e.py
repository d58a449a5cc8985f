"""End to end: the demo sample corpora through every Dagster asset into a release folder, checked as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from pipeline.settings.config import load_settings
from pipeline.publish.validate import validate_release

REPO = Path(__file__).resolve().parent.parent


def release_files(cfg) -> list[str]:
    files = cfg.release.files.model_dump()
    return sorted(files.values()) if isinstance(files, dict) else sorted(files)


def test_release_has_every_file(demo_release):
    from pipeline.steps.tables import absent_step_track

    cfg = load_settings()
    files = cfg.release.files.model_dump()
    optional = {files[k] for k in absent_step_track(demo_release, files)}
    for name in release_files(cfg):  # the T13 step files all there or none (a release without the step track)
        assert name in optional or (demo_release / name).is_file(), name
    assert (demo_release / "checksums.sha256").is_file()


def test_release_validates(demo_release):
    assert validate_release(demo_release) == []


def test_counts_consistent_and_isolated(demo_release):
    ev = pl.read_parquet(demo_release / "splits" / "processbench_eval.parquet")
    sft = pl.read_parquet(demo_release / "splits" / "processdata_sft.parquet")
    assert ev.height > 0 and sft.height > 0
    assert sum(1 for _ in open(demo_release / "splits" / "processbench_eval.jsonl")) == ev.height
    assert sum(1 for _ in open(demo_release / "splits" / "processdata_sft.jsonl")) == sft.height
    summary = json.loads((demo_release / "metadata" / "split_summary.json").read_text())
    levels = summary.get("eval_levels") or {}  # L2/L3 are eval files of their own
    assert summary["eval_items"] == sum(v["items"] for v in levels.values()) if levels else ev.height
    assert levels.get("L1", {}).get("items", ev.height) == ev.height and summary["sft_items"] == sft.height
    assert not set(ev["split_group_id"]) & set(sft["split_group_id"])
    assert set(ev["split"]) == {"eval"} and set(sft["split"]) == {"sft"}


def test_every_source_and_its_families(demo_release):
    cfg = load_settings()
    both = pl.concat(
        [pl.read_parquet(demo_release / "splits" / f) for f in ("processbench_eval.parquet", "processdata_sft.parquet")]
    )
    got = {
        (r["source_slug"], r["task_id"]) for r in both.select("source_slug", "task_id").unique().iter_rows(named=True)
    }
    for task_id, task in cfg.tasks.items():
        for slug, quota in task.quota.items():
            if quota:
                assert (slug, task_id) in got, f"{slug} {task_id} missing from the demo release"


def test_regeneration_matches_lock(demo_release):
    """The committed lock of the demo release's checksums (make regen-lock updates it deliberately)."""
    lock = REPO / "tests" / "regen" / "demo.sha256"
    current = (demo_release / "checksums.sha256").read_text()
    assert lock.exists(), "tests/regen/demo.sha256 missing: run make regen-lock"
    want = dict(reversed(line.split("  ", 1)) for line in lock.read_text().splitlines())
    got = dict(reversed(line.split("  ", 1)) for line in current.splitlines())
    changed = sorted(f for f in set(want) | set(got) if want.get(f) != got.get(f))
    assert not changed, f"release files differ from tests/regen/demo.sha256: {changed}"


def test_eval_answer_letters_balanced_per_source_and_family(demo_release):
    """Letters are assigned again within each split, so eval's majority-letter baseline is as close to random as its
    size allows (families with display labels, T8/T9, keep the letters their rendered images follow)."""
    ev = pl.read_parquet(demo_release / "splits" / "processbench_eval.parquet").filter(
        pl.col("display_labels_json").is_null()
    )
    for (src, task), rows in ev.group_by("source_slug", "task_id"):
        counts = rows["answer"].value_counts()["count"].to_list()
        k, n = rows["num_choices"][0], rows.height
        assert max(counts) <= -(-n // k), (src, task, counts)
