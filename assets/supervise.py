"""Supervising `processbench dev`'s child: it stops with us, and so does whatever it started (docs/running.md)."""

from __future__ import annotations

import time
from pathlib import Path


def supervise(
    cmd: list[str], poll_s: float = 0.5, env: dict | None = None, cwd: Path | None = None, grace_s: float = 10.0
) -> int:
    """Run `cmd` as a child and stop it (SIGTERM) when we get SIGINT/SIGTERM or when our parent dies. A `dagster
    dev` started in the background from a non-interactive shell ignores SIGINT and SIGTERM, and `make` killed by
    SIGTERM dies without passing the signal on, leaving its recipe running: so we watch the parent too. The child
    runs in a session of its own, and once it has exited whatever it started and left (the UI's processes, a run
    in flight) is stopped too: SIGTERM to its process group, SIGKILL after `grace_s`."""
    import os
    import signal
    import subprocess

    parent = os.getppid()
    child = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    stopping = []

    def stop(signum, _frame=None):
        stopping.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            rc = child.wait(timeout=poll_s)
            _stop_group(child.pid, grace_s)
            return 0 if stopping else rc
        except subprocess.TimeoutExpired:
            if os.getppid() != parent and not stopping:  # reparented: whoever started us is gone
                stop(signal.SIGTERM)


def _stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM to every process left in group `pgid`, SIGKILL to those still there after `grace_s`."""
    import os
    import signal

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
