"""The `processbench` commands a user runs without the UI."""

from __future__ import annotations

import argparse
import json
import re
import shutil

import dagster as dg
import polars as pl

from assets.cli import main
from pipeline.settings.config import load_settings


def test_ingest_writes_ir_and_summary(demo_samples, tmp_path, capsys):
    assert (
        main(["ingest", "--source", "reassemble", "--root", str(demo_samples["reassemble"]), "--out", str(tmp_path)])
        == 0
    )
    text = capsys.readouterr().out
    assert "source reassemble:" in text and "quarantined by reason" in text and "camera 'hand' missing" in text
    for name in ("units", "frames", "signals", "segments", "quarantine"):
        assert (tmp_path / f"{name}.parquet").is_file()
    units = pl.read_parquet(tmp_path / "units.parquet")
    q = pl.read_parquet(tmp_path / "quarantine.parquet")
    assert units.height >= 1 and q.height >= 1
    assert not set(units["unit_id"]) & set(q["unit_id"])


def test_ingest_of_a_missing_root_quarantines_the_source(tmp_path, capsys):
    assert (
        main(["ingest", "--source", "gm100", "--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 1
    )  # unusable: non-zero
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
        "item_id", pl.col("source_slug").alias("source"), "task_id", "split_group_id", "answer", "num_choices"
    )
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows.iter_rows(named=True)))
    assert main(["split", "--items", str(pool), "--out", str(tmp_path / "out")]) == 0
    ev = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    sft = [json.loads(x) for x in (tmp_path / "out" / "sft.jsonl").read_text().splitlines()]
    assert len(ev) + len(sft) == rows.height and ev and sft
    assert not {r["split_group_id"] for r in ev} & {r["split_group_id"] for r in sft}
    assert (tmp_path / "out" / "split_summary.json").is_file()


def test_build_of_one_source_is_a_valid_release_and_a_rebuild_runs_nothing(demo_samples, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", "")  # unset: the CLI falls back to the repository's .dagster_home
    monkeypatch.setattr("assets.cli.path_in_repo", lambda rel: tmp_path / rel)  # the repository's .dagster_home
    args = [
        "build",
        "--scale",
        "demo",
        "--sources",
        "aist",
        "--upstream",
        f"aist={demo_samples['aist']}",
        "--work-dir",
        str(tmp_path / "work"),
        "--release-dir",
        str(tmp_path / "release"),
        "--executor",
        "in_process",
    ]
    assert main(args) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "(7 step(s) run" in out  # ingest, labels, candidates, items of aist; split; steps (T13); release
    # a line per step start and end, with times; no Dagster log line
    for step in ("ingest_aist", "labels_aist", "candidates_aist", "items_aist", "split", "release"):
        assert re.search(rf"^\[build +[0-9.]+s\] {step} started$", out, re.M), step
        assert re.search(rf"^\[build +[0-9.]+s\] {step} done in [0-9.]+s$", out, re.M), step
    assert " - dagster - " not in captured.out + captured.err
    # every line a person reads is short; only the next commands, which quote the user's own paths, may be longer
    prose = [ln for ln in (captured.out + captured.err).splitlines() if not ln.lstrip().startswith("processbench ")]
    assert all(len(ln) <= 200 for ln in prose), max(prose, key=len)
    # the items per source and split / level, the release's absolute path, the next commands
    table = out.split("items per source and split / eval level:\n", 1)[1]
    head, _, aist, total = table.splitlines()[:4]
    assert head.split() == ["source", "eval", "L1", "eval", "L2", "sft", "total"]
    sft = pl.read_parquet(tmp_path / "release" / "splits" / "processdata_sft.parquet").height
    assert aist.split()[0] == "AIST-Bimanual" and int(aist.split()[3]) == sft and total.split()[0] == "all"
    assert f"release published: {tmp_path / 'release'}\n" in out
    assert f"processbench reconstruct --release {tmp_path / 'release'} --upstream aist={demo_samples['aist']}" in out
    assert f"processbench score --release {tmp_path / 'release'} --predictions" in out
    runs = dg.DagsterInstance.from_config(str(tmp_path / ".dagster_home")).get_runs()
    assert len(runs) == 1 and runs[0].job_name == "build"  # recorded in the default DAGSTER_HOME, one run
    assert main(args) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert main(["validate", str(tmp_path / "release")]) == 0
    rows = pl.read_parquet(tmp_path / "release" / "splits" / "processdata_sft.parquet")
    assert set(rows["source_slug"]) == {"aist"}


def test_an_unchanged_build_with_samples_writes_no_corpus_and_runs_no_step(demo_samples, tmp_path, monkeypatch, capsys):
    """`make rebuild` (build --samples) twice: the second finds the sample corpus the generator wrote (checked with
    the adapter options its record was written with: REASSEMBLE's only_split lists fewer units than the default) and
    runs no step."""
    import shutil

    from pipeline.publish import provenance

    slug = "reassemble"
    root = tmp_path / "samples" / slug
    shutil.copytree(demo_samples[slug], root)
    shutil.copy(demo_samples[slug].parent / f".{slug}.samples.json", root.parent)  # the generator's record
    monkeypatch.setenv(f"PROCESSBENCH_ROOT_{slug.upper()}", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / ".dagster_home"))
    written = []
    monkeypatch.setattr("assets.cli._write_samples", lambda *a, **k: written.append(a))
    args = [
        "build",
        "--samples",
        "--scale",
        "demo",
        "--sources",
        slug,
        "--work-dir",
        str(tmp_path / "work"),
        "--release-dir",
        str(tmp_path / "release"),
        "--executor",
        "in_process",
    ]
    assert main(args) == 0
    assert "(7 step(s) run" in capsys.readouterr().out
    assert main(args) == 0
    assert "nothing to run" in capsys.readouterr().out
    assert written == []  # the corpus was found up to date both times
    # planted: checked without its adapter options, the same corpus does not match its record (what re-wrote it)
    seed = load_settings(scale="demo").build.samples.seed
    assert not provenance.sample_record_matches(slug, root, "demo", seed)


def test_every_option_of_every_subcommand_has_help():
    from assets.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{name} {a.option_strings or a.dest}"
        for name, sp in sub.choices.items()
        for a in sp._actions
        if not isinstance(a, argparse._HelpAction) and not a.help
    ]
    assert len(sub.choices) >= 9 and missing == []


def test_validate_on_a_folder_that_is_no_release_says_so_in_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a release")
    assert main(["validate", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert f"{tmp_path} is not a ProcessBench release: none of its files is there (checksums.sha256" in captured.err


def test_an_unusable_source_stops_its_chain_with_one_line_and_the_step_says_the_same(tmp_path, monkeypatch, capsys):
    """Issue 31: an empty folder ran every downstream step and ended in a Dagster trace and
    `items/gm100:schema {... 'image_hashes_json' missing}`. Now ingest fails with one line naming the full path, what
    belongs there and the fix; labels/candidates/items never start; the UI's step failure says the same line."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    (tmp_path / "empty").mkdir()
    args = [
        "build",
        "--sources",
        "gm100",
        "--upstream",
        f"gm100={tmp_path / 'empty'}",
        "--executor",
        "in_process",
        "--work-dir",
        str(tmp_path / "work"),
        "--release-dir",
        str(tmp_path / "release"),
    ]
    assert main(args) == 1
    captured = capsys.readouterr()
    text = captured.out + captured.err
    line = (
        f"gm100: no usable source at {tmp_path / 'empty'}: root 'empty' is empty. Expected there: task_XXXXX/ folders"
    )
    assert f"ingest_gm100 FAILED: {line}" in captured.out
    assert "Traceback" not in text and "Stack Trace" not in text and "image_hashes_json" not in text
    assert "labels_gm100 started" not in text and "items_gm100 started" not in text
    assert "processbench samples" not in text  # nothing is suggested that writes beside a user's folder
    assert not (tmp_path / "release").exists()
    instance = dg.DagsterInstance.get()
    (run,) = instance.get_runs()
    (failure,) = [
        r.event_log_entry.dagster_event
        for r in instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    ]
    assert failure.step_key == "ingest_gm100"
    assert failure.event_specific_data.user_failure_data.description.startswith(line)


def test_a_hf_cache_folder_is_answered_with_its_snapshot(demo_samples, tmp_path):
    from pipeline.source_help import unusable_message

    repo = tmp_path / "hub" / "datasets--rhos-ai--gm100-cobotmagic-lerobot"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "snapshots").mkdir()
    (repo / "snapshots" / "3f2a9c1").symlink_to(demo_samples["gm100"])
    msg = unusable_message("gm100", repo, "root holds no task_XXXXX folders")
    assert "Hugging Face cache folder" in msg and f"--upstream gm100={repo / 'snapshots' / '3f2a9c1'}" in msg
    # one level too far up (a folder holding the data folder): the nearest folder with units is named
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "gm100-data").symlink_to(demo_samples["gm100"])
    msg = unusable_message("gm100", tmp_path / "mine", "root holds no task_XXXXX folders")
    assert f"Nearest match: {tmp_path / 'mine' / 'gm100-data'}." in msg and "\n" not in msg
