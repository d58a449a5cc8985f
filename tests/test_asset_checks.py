"""Every asset check passes on the demo build and fails when its defect is planted in a copy of the table it checks."""

from __future__ import annotations

import json
import re
import shutil

import polars as pl
import pytest

from assets.checks import checks_for
from assets.definitions import STEPS
from pipeline.settings.config import load_settings

SCHEMA_CHECKS = [(step, c) for step in STEPS for c in checks_for(step) if c.name == "schema"]
BY_NAME = {(c.asset, c.name): c for step in STEPS for c in checks_for(step)}


def _cfg(work, release):
    return load_settings(scale="demo").with_values({"build.work_dir": str(work), "build.release_dir": str(release)})


@pytest.fixture
def copy(demo_release, tmp_path):
    """A writable copy of the demo build's tables (no frame cache) and release."""
    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("frame_cache", "_fingerprints"))
    shutil.copytree(demo_release, release)
    return _cfg(work, release), work, release


def test_every_check_passes_on_the_demo_build(demo_release):
    cfg = _cfg(demo_release.parent / "work", demo_release)
    for step in STEPS:
        for check in checks_for(step):
            res = check.evaluate(cfg)
            assert res.passed or check.name == "quotas_met", (check.asset, check.name, res.metadata)


@pytest.mark.parametrize("step,check", SCHEMA_CHECKS, ids=[f"{c.asset}" for _, c in SCHEMA_CHECKS])
def test_schema_check_fails_on_a_dropped_column_and_a_wrong_dtype(demo_release, tmp_path, step, check):
    table = next(t for t in step.writes if t.name == check.asset)
    cfg = _cfg(tmp_path / "work", tmp_path / "release")
    src_cfg = _cfg(demo_release.parent / "work", demo_release)
    dst = table.file(cfg)
    dst.parent.mkdir(parents=True, exist_ok=True)
    df = pl.read_parquet(table.file(src_cfg))
    df.write_parquet(dst)
    assert check.evaluate(cfg).passed
    victim = next(iter(table.schema))
    df.drop(victim).write_parquet(dst)  # planted: a column is gone
    res = check.evaluate(cfg)
    assert not res.passed and any(victim in p for p in res.metadata["problems"].value)
    df.with_columns(
        pl.col(victim).cast(pl.Binary) if df.schema[victim] == pl.String else pl.col(victim).cast(pl.String)
    ).write_parquet(dst)  # planted: the column changed type
    assert not check.evaluate(cfg).passed
    dst.unlink()  # planted: the table is missing
    assert not check.evaluate(cfg).passed


def test_quarantine_share_fails_when_most_units_are_quarantined(copy):
    cfg, work, _ = copy
    check = BY_NAME[("ir/gm100/quarantine", "quarantine_share")]
    assert check.evaluate(cfg).passed
    q = pl.read_parquet(work / "ir" / "gm100" / "quarantine.parquet")
    n_units = pl.read_parquet(work / "ir" / "gm100" / "units.parquet").height
    planted = pl.DataFrame(
        [
            {
                "source": "gm100",
                "unit_id": f"planted_{i}",
                "stage": "ingest",
                "reason": "planted",
                "file": f"planted_{i}.parquet",
            }
            for i in range(n_units + 1)
        ],
        schema=q.schema,
    )
    pl.concat([q, planted]).write_parquet(work / "ir" / "gm100" / "quarantine.parquet")
    res = check.evaluate(cfg)
    assert not res.passed and "gm100" in res.metadata["over"].value
    (said,) = res.metadata["sentences"].value  # in words: by how much, and the most common reason
    assert re.fullmatch(
        r"gm100: \d+\.\d% of its units were quarantined at ingest or labels, over the limit of "
        r"\d+\.\d%; most often: planted \(\d+ units\)",
        said,
    ), said
    record = work / res.metadata["record"].value  # the full record, in the work folder
    assert json.loads(record.read_text())["over"] == res.metadata["over"].value
    assert "quarantine.parquet" in res.metadata["what_to_do"].value


def test_quotas_met_warns_on_a_shortfall(copy):
    cfg, work, _ = copy
    check = BY_NAME[("items/aist", "quotas_met")]
    (work / "items" / "aist_shortfall.json").write_text(
        json.dumps([{"source": "aist", "task_id": "T1", "quota": 5, "have": 3, "missing": 2}])
    )
    res = check.evaluate(cfg)
    assert not res.passed and res.severity.value == "WARN"
    # a record without the frames stage's figures still reads as a sentence
    assert res.metadata["sentences"].value == [
        "AIST-Bimanual T1 Phase Recognition: 3 of 5 items (2 short): the selection found 3 usable candidates for a "
        "quota of 5"
    ]
    assert (work / "checks" / "items" / "aist" / "quotas_met.json").is_file()
    (work / "items" / "aist_shortfall.json").write_text("[]")
    assert check.evaluate(cfg).passed
    assert not (work / "checks" / "items" / "aist" / "quotas_met.json").exists()  # only what does not pass


def test_step_quotas_met_warns_with_the_figures_on_a_shortfall(copy):
    cfg, work, _ = copy
    check = BY_NAME[("steps/summary", "quotas_met")]
    path = work / "steps" / "summary.json"
    summary = json.loads(path.read_text())
    for s in summary["sources"].values():  # met: the quota is what was built
        s["quota"] = s["items"]
    path.write_text(json.dumps(summary))
    assert check.evaluate(cfg).passed
    slug = sorted(summary["sources"])[0]
    summary["sources"][slug]["quota"] = summary["sources"][slug]["items"] + 7  # planted: 7 short
    path.write_text(json.dumps(summary))
    res = check.evaluate(cfg)
    assert not res.passed and res.severity.value == "WARN"
    (problem,) = res.metadata["problems"].value
    assert problem.startswith(f"{slug}: {summary['sources'][slug]['items']} step items") and "(7 short)" in problem


def test_no_group_in_both_splits_fails_on_a_leaked_group(copy):
    cfg, work, _ = copy
    check = next(c for c in BY_NAME.values() if c.name == "no_group_in_both_splits")
    assert check.evaluate(cfg).passed and check.blocking
    items = pl.read_parquet(work / "split" / "items.parquet")
    group = items.filter(pl.col("split") == "sft")["split_group_id"].value_counts(sort=True)["split_group_id"][0]
    first = items.with_row_index().filter(pl.col("split_group_id") == group)["index"][0]
    leaked = items.with_columns(
        pl.when(pl.int_range(pl.len()) == first).then(pl.lit("eval")).otherwise(pl.col("split")).alias("split")
    )
    leaked.write_parquet(work / "split" / "items.parquet")
    res = check.evaluate(cfg)
    assert not res.passed and group in res.metadata["leaked_groups"].value
    assert res.metadata["sentences"].value == [f"1 split groups have items in eval and in SFT, e.g. {group}"]


def test_eval_group_counts_fails_when_a_source_has_one_eval_group_too_many(copy):
    cfg, work, _ = copy
    check = next(c for c in BY_NAME.values() if c.name == "eval_group_counts")
    assert check.evaluate(cfg).passed
    summary = json.loads((work / "split" / "summary.json").read_text())
    slug = sorted(summary["sources"])[0]
    summary["sources"][slug]["eval_groups"] += 1
    (work / "split" / "summary.json").write_text(json.dumps(summary))
    assert not check.evaluate(cfg).passed


def test_release_valid_fails_on_a_tampered_file(copy):
    cfg, _, release = copy
    check = next(c for c in BY_NAME.values() if c.name == "release_valid")
    assert check.evaluate(cfg).passed
    (release / "metadata" / "schema.md").write_text("tampered\n")
    assert not check.evaluate(cfg).passed


def test_release_path_free_fails_on_an_absolute_path(copy):
    cfg, _, release = copy
    check = next(c for c in BY_NAME.values() if c.name == "release_path_free")
    assert check.evaluate(cfg).passed
    with open(release / "metadata" / "reconstruction.md", "a") as f:
        f.write("\nread from /home/alice/datasets/gm100\n")
    res = check.evaluate(cfg)
    assert not res.passed and "reconstruction.md" in str(res.metadata["leaks"].value)


def test_release_path_free_reads_parquet_rows_and_blocks(copy):
    """The path scan (the only one in the build since release_valid leaves it out) reads parquet rows too, and a
    failure blocks publication."""
    cfg, _, release = copy
    check = next(c for c in BY_NAME.values() if c.name == "release_path_free")
    assert check.blocking and check.evaluate(cfg).passed
    eval_parquet = next(release.glob("splits/*eval*.parquet"))
    df = pl.read_parquet(eval_parquet)
    df.with_columns(pl.lit("/home/alice/frames/x.png").alias("question")).write_parquet(eval_parquet)
    res = check.evaluate(cfg)
    assert not res.passed and eval_parquet.name in str(res.metadata["leaks"].value)


def test_isolation_keys_hold_fails_when_an_sft_item_shares_an_eval_scene(copy):
    cfg, work, _ = copy
    check = next(c for c in BY_NAME.values() if c.name == "isolation_keys_hold")
    assert check.evaluate(cfg).passed and check.blocking
    items = pl.read_parquet(work / "split" / "items.parquet")
    rh = items.filter(pl.col("source") == "rh20t")
    eval_unit = rh.filter(pl.col("split") == "eval")["unit_id"][0]
    victim = items.with_row_index().filter((pl.col("source") == "rh20t") & (pl.col("split") == "sft"))["index"][0]
    # planted: an SFT item claims a unit of an eval (task, scene), keeping its own split group id
    items.with_columns(
        pl.when(pl.int_range(pl.len()) == victim).then(pl.lit(eval_unit)).otherwise(pl.col("unit_id")).alias("unit_id")
    ).write_parquet(work / "split" / "items.parquet")
    res = check.evaluate(cfg)
    assert not res.passed and res.metadata["n_problems"].value >= 1


def test_eval_level_counts_fail_when_a_level_row_moves(copy):
    cfg, work, _ = copy
    check = next(c for c in BY_NAME.values() if c.name == "eval_level_counts")
    assert check.evaluate(cfg).passed
    items = pl.read_parquet(work / "split" / "items.parquet")
    first = items.with_row_index().filter(pl.col("eval_level") == "L1")["index"][0]
    # planted: one L1 row relabelled L3, so the rows per level no longer match split_summary.json
    items.with_columns(
        pl.when(pl.int_range(pl.len()) == first).then(pl.lit("L3")).otherwise(pl.col("eval_level")).alias("eval_level")
    ).write_parquet(work / "split" / "items.parquet")
    assert not check.evaluate(cfg).passed


def test_validity_limits_fail_on_a_reported_problem_and_a_missing_report(copy):
    cfg, _, release = copy
    check = next(c for c in BY_NAME.values() if c.name == "validity_limits")
    assert check.evaluate(cfg).passed and check.blocking
    path = release / "metadata" / "validity_report.json"
    report = json.loads(path.read_text())
    report["problems"] = ["gm100/T1: blind text-only 0.60 is 0.35 over random"]  # planted: a family past its limit
    path.write_text(json.dumps(report))
    res = check.evaluate(cfg)
    assert not res.passed and res.metadata["n_problems"].value == 1
    path.unlink()
    assert not check.evaluate(cfg).passed


def test_ui_metadata_has_column_descriptions_and_row_counts_of_text_tables(demo_release):
    """Issue 31: the UI's column descriptions were empty although pipeline/release/schema.py has them, and the release's
    jsonl / txt / csv tables had no row count."""
    import polars as pl

    from assets.checks import table_metadata
    from assets.settings import BuildSettings
    from assets.tables import all_steps, tables_by_name
    from pipeline.release.schema import DESCRIPTIONS

    cfg = BuildSettings(
        scale="demo", work_dir=str(demo_release.parent / "work"), release_dir=str(demo_release)
    ).config()
    tables = tables_by_name(all_steps(cfg))
    meta = table_metadata(tables["release/eval_parquet"], cfg)
    cols = {c.name: c.description for c in meta["dagster/column_schema"].columns}
    assert cols["item_id"] == DESCRIPTIONS["item_id"] and cols["answer"] == DESCRIPTIONS["answer"]
    files = cfg.release.files.model_dump()
    expect = {
        "eval_jsonl": pl.read_parquet(demo_release / files["eval_parquet"]).height,
        "sft_jsonl": pl.read_parquet(demo_release / files["sft_parquet"]).height,
        "task_distribution": pl.read_csv(demo_release / files["task_distribution"]).height,
    }
    for name in [n for n in files if n.startswith("split_groups_")]:
        expect[name] = len((demo_release / files[name]).read_text().split())
    assert len(expect) >= 5
    for name, rows in expect.items():
        assert table_metadata(tables[f"release/{name}"], cfg)["dagster/row_count"] == rows, name
    # the work folder's tables carry no release descriptions
    work = table_metadata(tables["items/gm100"], cfg)["dagster/column_schema"].columns
    assert all(c.description is None for c in work)


REPR = re.compile(r"\{'|\['|\{\"|\[\{|': ")  # a Python dict or list printed as it is


def test_no_check_line_of_the_demo_build_is_long_or_a_python_repr(demo_release):
    """Issue 40: the build printed `check warning: items/aist:quotas_met {'shortfall': [{'missing': 806, ...` on one
    line of several hundred characters. The session build's check results, read back from its Dagster event log,
    printed as `processbench build` prints them: sentences, what to do, where the record is."""
    import dagster as dg

    from assets.run import check_texts

    with dg.DagsterInstance.local_temp(str(demo_release.parent / "dagster_home")) as inst:
        evaluations = [
            e.dagster_event.asset_check_evaluation_data
            for run in inst.get_runs()
            for e in inst.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
    assert evaluations
    texts = [
        t for sev in (dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR) for t in check_texts(evaluations, sev)
    ]
    quota = [t for t in texts if t.startswith("check warning: items/") and "quotas_met" in t]
    assert quota, "the demo build's shortfalls are warned about"
    for t in quota:  # what fell short, by how much, why, what to do
        assert re.search(r"T\d+ [A-Z][\w -]+: \d+ of \d+ items \(\d+ short\): \w", t.replace("\n    ", " ")), t
        assert "what to do:" in t and "full record: checks/" in t
    lines = [ln for t in texts for ln in t.splitlines()]
    assert all(len(ln) <= 200 for ln in lines), max(lines, key=len)
    assert not [ln for ln in lines if REPR.search(ln)]
