"""A Dask cluster started the way its users start one (issue 31): `dask scheduler` and `dask worker ADDRESS
--nworkers 2` with their defaults, so each worker is a daemonic process under a nanny and may not start children.
The build's in-step pools (frame decoding, the split's searches, the release path scan, the validity audit beside the
exports) then run on threads (pipeline/core/pool.py `children_allowed`); the release equals the committed lock."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import build_demo
from factories import digest_tree

REPO = Path(__file__).resolve().parent.parent


def _square(x):
    return {"x": x, "sq": x * x, "pid": os.getpid(), "thread": threading.get_ident()}


def _in_daemon(queue):
    from pipeline.core.pool import children_allowed, run_beside, run_tasks

    got = []
    run_tasks(_square, range(6), 3, got.append, lambda t, r: {"x": t, "failed": r})
    here, there = run_beside(_square, 7, lambda: "here")
    queue.put(
        {
            "allowed": children_allowed(),
            "pids": sorted({g["pid"] for g in got} | {there["pid"]}),
            "results": sorted((g["x"], g.get("sq")) for g in got),
            "beside": (here, there["sq"]),
            "me": os.getpid(),
        }
    )


def test_pools_run_on_threads_inside_a_daemonic_process():
    """Planted: the same calls in a daemonic process failed with `daemonic processes are not allowed to have
    children` before the pool fell back to threads."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_in_daemon, args=(queue,), daemon=True)
    proc.start()
    out = queue.get(timeout=120)
    proc.join(timeout=60)
    assert out["allowed"] is False
    assert out["results"] == [(x, x * x) for x in range(6)]
    assert out["beside"] == ("here", 49)
    assert out["pids"] == [out["me"]]  # no child process: everything ran in the daemonic process's threads


def _wait_for(cond, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def _workers(scheduler_file: Path) -> int:
    from distributed import Client

    with Client(scheduler_file=str(scheduler_file), timeout=30) as client:
        return len(client.scheduler_info()["workers"])


@pytest.mark.slow
def test_demo_builds_on_a_cluster_started_with_dask_defaults(demo_samples, demo_release, tmp_path):
    dask = str(Path(sys.executable).with_name("dask"))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    sched_file = tmp_path / "scheduler.json"
    procs = []
    try:
        # free ports: the scheduler picks one (--port 0) and writes it to its scheduler file
        procs.append(
            subprocess.Popen(
                [
                    dask,
                    "scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(sched_file),
                ],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        address = _wait_for(
            lambda: sched_file.is_file() and json.loads(sched_file.read_text() or "{}").get("address"),
            "the scheduler file",
        )
        assert address.startswith("tcp://127.0.0.1:")
        procs.append(
            subprocess.Popen(
                [dask, "worker", address, "--nworkers", "2", "--no-dashboard"],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_for(lambda: _workers(sched_file) == 2, "two workers")
        built = build_demo(demo_samples, tmp_path / "out", executor="dask", dask_address=address)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    first, again = digest_tree(demo_release), digest_tree(built)
    assert sorted(first) == sorted(again)
    assert [f for f in first if first[f] != again[f]] == []
