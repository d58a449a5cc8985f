"""The Dagster graph: loads, has one asset per stage in its group, per-source partitions, the checks, and the UI serves it."""

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

from assets.definitions import defs

REPO = Path(__file__).resolve().parent.parent
STAGES = {"ingest": "ingest", "labels": "labels", "candidates": "items", "frames": "frames", "split": "split",
          "release": "release"}


def test_definitions_load_and_shape():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == set(STAGES)
    for name, group in STAGES.items():
        node = graph.get(dg.AssetKey(name))
        assert node.group_name == group
        assert node.description, f"{name} has no description"
        assert (node.partitions_def is not None) == (name in {"ingest", "labels", "candidates", "frames"})
    parts = graph.get(dg.AssetKey("ingest")).partitions_def.get_partition_keys()
    assert parts == ["gm100", "rh20t", "reassemble", "aist"]
    checks = {k.name for k in graph.asset_check_keys}
    assert {"no_group_in_both_splits", "release_valid", "release_path_free", "quarantine_share",
            "eval_group_counts"} <= checks


def test_dagster_cli_validates_definitions():
    env = {**os.environ, "DAGSTER_HOME": str(REPO / ".dagster_home")}
    (REPO / ".dagster_home").mkdir(exist_ok=True)
    out = subprocess.run([str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-m",
                          "assets.definitions"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_graph_and_stops_on_sigterm(tmp_path):
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("processbench")), "dev", "--port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = json.dumps({"query": "{ assetNodes { assetKey { path } groupName isPartitioned } }"}).encode()
        nodes = None
        deadline = time.time() + 180
        while time.time() < deadline and nodes is None:
            time.sleep(2)
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=query,
                                             headers={"Content-Type": "application/json"})
                nodes = json.load(urllib.request.urlopen(req, timeout=10))["data"]["assetNodes"]
            except Exception:
                nodes = None
        assert nodes, "the UI did not answer GraphQL within 180 s"
        got = {n["assetKey"]["path"][0]: (n["groupName"], n["isPartitioned"]) for n in nodes}
        assert got["frames"] == ("frames", True) and got["release"] == ("release", False)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0
    with socket.socket() as s:  # the whole tree is gone: the port is free again
        assert s.connect_ex(("127.0.0.1", port)) != 0
