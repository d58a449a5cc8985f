"""The Dagster graph: one asset per table with the lineage the stages read, generated checks, one build job, and the UI\nserves it with row counts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import polars as pl

from assets.definitions import defs

from assets.checks import checks_for
from assets.definitions import CHECKS, STEPS, TABLES, build_job
from assets.tables import all_steps, tables_by_name
from pipeline.settings.config import load_settings

REPO = Path(__file__).resolve().parent.parent
SLUGS = ["gm100", "rh20t", "reassemble", "aist"]


def _deps(graph, name):
    return {k.to_user_string() for k in graph.get(dg.AssetKey(name.split("/"))).parent_keys}


def test_one_asset_per_table_with_the_lineage_the_code_reads():
    dg.Definitions.validate_loadable(defs)
    cfg = load_settings()
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    per_source = {
        f"ir/{s}/{t}"
        for s in SLUGS
        for t in ("units", "frames", "signals", "segments", "quarantine", "notes", "corpus")
    }
    per_source |= {
        f"{layer}/{s}"
        for s in SLUGS
        for layer in ("candidates", "items", "gate_quarantine", "shortfall", "item_frames")
    }
    assert per_source <= keys
    assert {f"labels/gm100/{t}" for t in ("units", "frames", "arms", "steps", "segments", "primitives")} <= keys
    assert {"split/items", "split/summary"} | {f"release/{n}" for n in cfg.release.files.model_dump()} <= keys
    # every table a stage reads is a declared dependency (split and release read the IR units; the release also the
    # corpus records, for its provenance, and the items' frame thumbnails, for its validity audit)
    assert _deps(graph, "split/items") == {f"items/{s}" for s in SLUGS} | {f"ir/{s}/units" for s in SLUGS}
    assert _deps(graph, "release/eval_parquet") == (
        {"split/items", "split/summary", "steps/items", "steps/summary"}
        | {f"ir/{s}/units" for s in SLUGS}
        | {f"ir/{s}/corpus" for s in SLUGS}
        | {f"item_frames/{s}" for s in SLUGS}
    )
    assert _deps(graph, "candidates/aist") == {
        f"ir/aist/{t}" for t in ("units", "frames", "signals", "segments", "quarantine", "notes")
    } | {f"labels/aist/{t}" for t in ("units", "frames", "arms", "steps", "segments", "primitives")}
    assert _deps(graph, "items/aist") == {"candidates/aist", "ir/aist/corpus"}  # its selection key: the corpus
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.description and node.group_name in {
            "ir",
            "labels",
            "candidates",
            "items",
            "split",
            "release",
            "exports",
        }


def test_checks_are_generated_from_the_schema_registries():
    graph = defs.resolve_asset_graph()
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    with_schema = {n for n, t in TABLES.items() if t.schema is not None}
    assert {(n, "schema") for n in with_schema} <= checks
    assert {
        "ir/aist/units",
        "labels/aist/frames",
        "candidates/aist",
        "items/aist",
        "release/eval_parquet",
    } <= with_schema
    assert {
        ("split/items", "no_group_in_both_splits"),
        ("split/summary", "eval_group_counts"),
        ("release/checksums", "release_valid"),
        ("release/checksums", "release_path_free"),
        ("ir/gm100/quarantine", "quarantine_share"),
        ("items/gm100", "quotas_met"),
    } <= checks
    assert sum(map(len, CHECKS.values())) == len(checks)


def test_every_check_says_what_to_do_and_its_lines_stay_short():
    """Issue 40: every check that can warn or fail has words for a person (assets/tables.py `advice`, the schema
    checks' in assets/checks.py), and its printed lines stay under 200 characters whatever its findings."""
    from assets.checks import check_lines, sentences

    checks = [c for s in STEPS for c in checks_for(s)]
    assert {c.name for c in checks} >= {"schema", "quotas_met", "quarantine_share", "release_valid", "validity_limits"}
    assert not [(c.asset, c.name) for c in checks if not c.advice]
    long = "a finding of many words " * 30
    lines = check_lines("warning", "items/aist", "quotas_met", [long] * 8, long, "checks/items/aist/quotas_met.json")
    assert lines[0] == "check warning: items/aist quotas_met" and "  - and 3 more" in lines
    assert all(len(ln) <= 200 for ln in lines) and len(lines) > 10
    assert all(len(ln) <= 200 for ln in check_lines("failed", "a", "b", ["x" * 500], ""))  # one long word: broken
    assert sentences({"problems": ["a", "b"], "n_problems": 60}) == ["a", "b", "and 58 more"]
    assert sentences({"sentences": ["said"], "problems": ["p"]}) == ["said"]


def test_the_build_job_covers_every_step_in_one_run_with_a_choice_of_engine():
    job = build_job()
    assert job.executor_def.name == "processbench_executor"
    ops = {n.name for n in job.graph.node_defs}
    assert ops == {s.name for s in STEPS}
    # the four sources' chains do not depend on each other, so the executor can run them side by side
    graph = defs.resolve_asset_graph()
    up = graph.get(dg.AssetKey(["items", "gm100"])).parent_keys
    assert all("gm100" in k.path for k in up)


def test_every_job_the_ui_can_launch_takes_the_build_lock():
    """The UI's "Materialize all" and any asset selection launch Dagster's implicit asset job, which took no lock
    (two UI runs interleaved for 7.5 minutes, a UI run beside a locked terminal build was not refused): every job of
    the definitions, the implicit one included, runs on the locked executor."""
    jobs = defs.resolve_all_job_defs()
    assert defs.resolve_implicit_global_asset_job_def().name in {j.name for j in jobs} and len(jobs) >= 2
    assert {j.name: j.executor_def.name for j in jobs} == {j.name: "processbench_executor" for j in jobs}


def test_dagster_cli_validates_definitions():
    env = {**os.environ, "DAGSTER_HOME": str(REPO / ".dagster_home")}
    (REPO / ".dagster_home").mkdir(exist_ok=True)
    out = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-m", "assets.definitions"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_graph_with_row_counts_and_stops_on_sigterm(demo_release):
    port = _free_port()
    home = demo_release.parent / "dagster_home"  # where the session's demo build recorded its run
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("processbench")), "dev", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        query = json.dumps(
            {
                "query": "{ assetNodes { assetKey { path } groupName assetMaterializations(limit: 1) "
                "{ metadataEntries { label ... on IntMetadataEntry { intValue } } } } }"
            }
        ).encode()
        nodes = None
        deadline = time.time() + 600  # the UI's start under a loaded 2-core scheduler: a bound, not a wait
        while time.time() < deadline and nodes is None:
            time.sleep(2)
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/graphql", data=query, headers={"Content-Type": "application/json"}
                )
                nodes = json.load(urllib.request.urlopen(req, timeout=10))["data"]["assetNodes"]
            except Exception:  # noqa: BLE001 - not up yet (refused, timeout, half-started): ask again
                nodes = None
        assert nodes, "the UI did not answer GraphQL within 180 s"
        got = {"/".join(n["assetKey"]["path"]): n for n in nodes}
        assert got["ir/gm100/units"]["groupName"] == "ir" and got["release/eval_parquet"]["groupName"] == "release"
        # the demo build's run is in this DAGSTER_HOME: the UI shows each table's row count
        for asset, table in (("items/aist", "aist.parquet"), ("item_frames/aist", "aist_frames.parquet")):
            meta = got[asset]["assetMaterializations"][0]["metadataEntries"]
            rows = {e["label"]: e.get("intValue") for e in meta}
            assert rows["dagster/row_count"] == pl.read_parquet(demo_release.parent / "work" / "items" / table).height
        # issue 40: every materialized table, not 88 of 90 (the step files had none): parquet, jsonl, csv, txt,
        # checksums and the exports
        cfg = load_settings(scale="demo").with_values(
            {"build.work_dir": str(demo_release.parent / "work"), "build.release_dir": str(demo_release)}
        )
        kinds = (".parquet", ".jsonl", ".csv", ".txt", ".sha256")
        tables = [
            name
            for name, t in tables_by_name(all_steps(cfg)).items()
            if t.group == "exports" or Path(t.path).suffix in kinds
        ]
        assert len(tables) >= 90 and {"release/steps_eval_parquet", "release/steps_sft_parquet"} <= set(tables)
        no_count = [
            n
            for n in tables
            if not got[n]["assetMaterializations"]
            or "dagster/row_count" not in {e["label"] for e in got[n]["assetMaterializations"][0]["metadataEntries"]}
        ]
        assert not no_count
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0
    with socket.socket() as s:  # the whole tree is gone: the port is free again
        assert s.connect_ex(("127.0.0.1", port)) != 0
