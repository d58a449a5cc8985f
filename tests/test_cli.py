"""The `processbench` commands a user runs without the UI."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import polars as pl

from assets.cli import main
from pipeline.config import load_config


def test_ingest_writes_ir_and_summary(demo_samples, tmp_path, capsys):
    assert main(["ingest", "--source", "reassemble", "--root", str(demo_samples["reassemble"]),
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "source reassemble:" in text and "quarantined by reason" in text and "camera 'hand' missing" in text
    for name in ("units", "frames", "signals", "segments", "quarantine"):
        assert (tmp_path / f"{name}.parquet").is_file()
    units = pl.read_parquet(tmp_path / "units.parquet")
    q = pl.read_parquet(tmp_path / "quarantine.parquet")
    assert units.height >= 1 and q.height >= 1
    assert not set(units["unit_id"]) & set(q["unit_id"])


def test_ingest_of_a_missing_root_quarantines_the_source(tmp_path, capsys):
    assert main(["ingest", "--source", "gm100", "--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 1  # unusable: non-zero
    q = pl.read_parquet(tmp_path / "o" / "quarantine.parquet")
    assert q["unit_id"].to_list() == ["*"] and "does not exist" in q["reason"][0]
    assert str(tmp_path) not in q["reason"][0]  # path-free


def test_validate_accepts_the_demo_release_and_rejects_a_tampered_copy(demo_release, tmp_path, capsys):
    assert main(["validate", str(demo_release)]) == 0
    copy = tmp_path / "release"
    shutil.copytree(demo_release, copy)
    (copy / "metadata" / "schema.md").write_text("tampered\n")
    assert main(["validate", str(copy)]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_split_resplits_a_pool_file(demo_release, tmp_path):
    rows = pl.read_parquet(demo_release / "splits" / "processdata_sft.parquet").select(
        "item_id", pl.col("source_slug").alias("source"), "task_id", "split_group_id", "answer", "num_choices")
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows.iter_rows(named=True)))
    assert main(["split", "--items", str(pool), "--out", str(tmp_path / "out")]) == 0
    ev = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    sft = [json.loads(x) for x in (tmp_path / "out" / "sft.jsonl").read_text().splitlines()]
    assert len(ev) + len(sft) == rows.height and ev and sft
    assert not {r["split_group_id"] for r in ev} & {r["split_group_id"] for r in sft}
    assert (tmp_path / "out" / "split_summary.json").is_file()


def test_build_of_one_source_is_a_valid_release_and_a_rebuild_runs_nothing(demo_samples, tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv("DAGSTER_HOME", "")  # unset: the CLI falls back to the repository's .dagster_home
    monkeypatch.setattr("assets.cli.path_in_repo", lambda rel: tmp_path / rel)  # the repository's .dagster_home
    args = ["build", "--scale", "demo", "--sources", "aist", "--upstream", f"aist={demo_samples['aist']}",
            "--work-dir", str(tmp_path / "work"), "--release-dir", str(tmp_path / "release"), "--executor", "in_process"]
    assert main(args) == 0
    assert "(6 step(s) run" in capsys.readouterr().out  # ingest, labels, candidates, items of aist; split; release
    runs = dg.DagsterInstance.from_config(str(tmp_path / ".dagster_home")).get_runs()
    assert len(runs) == 1 and runs[0].job_name == "build"  # recorded in the default DAGSTER_HOME, one run
    assert main(args) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert main(["validate", str(tmp_path / "release")]) == 0
    rows = pl.read_parquet(tmp_path / "release" / "splits" / "processdata_sft.parquet")
    assert set(rows["source_slug"]) == {"aist"}


def test_an_unchanged_build_with_samples_writes_no_corpus_and_runs_no_step(demo_samples, tmp_path, monkeypatch,
                                                                            capsys):
    """`make rebuild` (build --samples) twice: the second finds the sample corpus the generator wrote (checked with
    the adapter options its record was written with: REASSEMBLE's only_split lists fewer units than the default) and
    runs no step."""
    import shutil

    from pipeline import provenance

    slug = "reassemble"
    root = tmp_path / "samples" / slug
    shutil.copytree(demo_samples[slug], root)
    shutil.copy(demo_samples[slug].parent / f".{slug}.samples.json", root.parent)  # the generator's record
    monkeypatch.setenv(f"PROCESSBENCH_ROOT_{slug.upper()}", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / ".dagster_home"))
    written = []
    monkeypatch.setattr("assets.cli._write_samples", lambda *a, **k: written.append(a))
    args = ["build", "--samples", "--scale", "demo", "--sources", slug, "--work-dir", str(tmp_path / "work"),
            "--release-dir", str(tmp_path / "release"), "--executor", "in_process"]
    assert main(args) == 0
    assert "(6 step(s) run" in capsys.readouterr().out
    assert main(args) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert written == []  # the corpus was found up to date both times
    # planted: checked without its adapter options, the same corpus does not match its record (what re-wrote it)
    seed = load_config(scale="demo")["build"]["samples"]["seed"]
    assert not provenance.sample_record_matches(slug, root, "demo", seed)
