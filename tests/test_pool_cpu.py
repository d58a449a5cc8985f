"""pipeline/core/pool.py workers_cpu_s: a step's cost counts the CPU time of its pool's workers. A worker started by a
fork server is the server's child, so the step's RUSAGE_CHILDREN never sees it (the release-scale build's steps
reported a third of the tree's CPU time); a worker that is the step's own child is counted there, and not twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TASKS = textwrap.dedent("""
    import time

    def burn(seconds):
        # CPU time, not wall time: however busy the machine, each task spends this much CPU
        start = time.process_time()
        while time.process_time() - start < seconds:
            sum(i * i for i in range(1000))
        return time.process_time() - start
""")

RUN = textwrap.dedent("""
    import json, resource, sys
    from pipeline.core.pool import run_tasks, workers_cpu_s
    import cpu_tasks

    def children():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    burnt = []
    c0, w0 = children(), workers_cpu_s()
    run_tasks(cpu_tasks.burn, [0.4] * 4, 2, burnt.append, lambda t, r: 0.0, mp_context=sys.argv[1])
    print(json.dumps({"burnt": sum(burnt), "workers": workers_cpu_s() - w0, "children": children() - c0}))
""")


@pytest.mark.parametrize("ctx", ["forkserver", "fork"])
def test_pool_workers_cpu_is_counted_once(tmp_path, ctx):
    (tmp_path / "cpu_tasks.py").write_text(TASKS)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", RUN, ctx], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["burnt"] >= 1.6
    if ctx == "forkserver":  # the fork server's children: only workers_cpu_s sees them
        assert got["workers"] >= 0.9 * got["burnt"], got
    else:  # the caller's own children: RUSAGE_CHILDREN counts them once joined, workers_cpu_s leaves them out
        assert got["workers"] == 0.0 and got["children"] >= 0.9 * got["burnt"], got
