"""pipeline/core/pool.py: pool workers (and the fork server) die with the process that started the pool, even when
it is killed with SIGKILL (issue 14: orphaned forkserver and workers after kill -9 of the build)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TASKS = textwrap.dedent("""
    import os, time
    from pathlib import Path

    def hang(out_dir):
        # record this worker and its parent (the fork server under forkserver), then block like a long decode
        Path(out_dir, f"{os.getpid()}.pid").write_text(str(os.getppid()))
        time.sleep(120)
        return {}
""")

BUILD = textwrap.dedent("""
    import sys
    from pipeline.core.pool import run_tasks
    import lifetime_tasks

    out, ctx = sys.argv[1], sys.argv[2]
    run_tasks(lifetime_tasks.hang, [out] * 4, 2, lambda r: None, lambda t, r: {}, mp_context=ctx)
""")


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("ctx", ["forkserver", "spawn"])
def test_workers_die_with_a_killed_parent(tmp_path, ctx):
    (tmp_path / "lifetime_tasks.py").write_text(TASKS)
    out = tmp_path / "pids"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    build = subprocess.Popen([sys.executable, "-c", BUILD, str(out), ctx], env=env, cwd=REPO)
    try:
        deadline = time.time() + 60
        while len(list(out.glob("*.pid"))) < 2:
            assert build.poll() is None, "the pool process ended early"
            assert time.time() < deadline, "workers did not start"
            time.sleep(0.2)
        workers = [int(p.stem) for p in out.glob("*.pid")]
        parents = {int(p.read_text()) for p in out.glob("*.pid")} - {build.pid}  # the fork server, if any
        assert (len(parents) == 1) == (ctx == "forkserver")
        os.kill(build.pid, signal.SIGKILL)
        build.wait()
        deadline = time.time() + 5
        while time.time() < deadline and not all(_gone(p) for p in workers + sorted(parents)):
            time.sleep(0.1)
        alive = [p for p in workers + sorted(parents) if not _gone(p)]
        assert not alive, f"processes outlived the killed pool owner: {alive}"
    finally:
        if build.poll() is None:
            build.kill()
        for p in out.glob("*.pid"):  # never leave a test's orphans behind, whatever happened above
            for pid in (int(p.stem), int(p.read_text())):
                if pid != os.getpid() and not _gone(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def test_run_beside_returns_both_results_and_raises_the_workers_error():
    """The release step's validity audit runs in a worker beside the exports: both results come back, in order, and
    a failure in the worker is raised, never turned into a result."""
    import math

    from pipeline.core.pool import run_beside

    assert run_beside(math.sqrt, 16.0, lambda: "here") == ("here", 4.0)
    with pytest.raises(ValueError):
        run_beside(math.sqrt, -1.0, lambda: "here")


NATIVE = textwrap.dedent("""
    import json, os, subprocess, sys
    os.environ["OPENBLAS_NUM_THREADS"] = "2"  # a machine where BLAS would start a thread per core
    import numpy  # noqa: F401 - loads OpenBLAS with 2 threads
    from threadpoolctl import threadpool_info
    from pipeline.core.pool import limit_native_threads

    def blas_threads():
        return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    before = blas_threads()
    limit_native_threads(1)
    child = subprocess.run([sys.executable, "-c", "import numpy, json; from threadpoolctl import threadpool_info; "
                            "print(json.dumps(sorted({i['num_threads'] for i in threadpool_info() "
                            "if i['user_api'] == 'blas'})))"], capture_output=True, text=True, check=True)
    print(json.dumps({"before": before, "after": blas_threads(), "child": json.loads(child.stdout)}))
""")


def test_native_threads_limit_this_process_and_the_processes_it_starts():
    """build.executor.native_threads: a step's own BLAS pool and those of the workers it starts have 1 thread."""
    out = subprocess.run(
        [sys.executable, "-c", NATIVE],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert json.loads(out.stdout) == {"before": [2], "after": [1], "child": [1]}
