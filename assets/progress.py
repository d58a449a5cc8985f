"""What `processbench build` prints while its run goes: one line when a step starts and one when it ends, with the
time since the build started and the step's own duration, read from the run's event log (the same records the UI
shows, so it works whatever the executor: in_process, multiprocess, Dask workers elsewhere writing to the shared
instance). Dagster's own console logger is turned down for these runs (assets/run.py), so no DEBUG lines.

A step that failed with a failure the project explains (pipeline/core/errors.py, raised as `dg.Failure` by
assets/definitions.py) is one line with that explanation; any other failure (a bug) is shown with its trace."""

from __future__ import annotations

import threading
import time
from typing import Callable

import dagster as dg
from dagster import DagsterEventType as E

KINDS = {E.STEP_START, E.STEP_SUCCESS, E.STEP_FAILURE, E.STEP_SKIPPED}


def failure_line(event) -> tuple[str, str | None]:
    """(one-line reason, trace or None) of a STEP_FAILURE / RUN_FAILURE dagster event."""
    data = event.event_specific_data
    user = getattr(data, "user_failure_data", None)
    if user is not None and user.description:
        return user.description, None
    error = getattr(data, "error", None)
    if error is None:
        return event.message or "failed", None
    last = error.message.strip().splitlines()[-1] if error.message.strip() else (event.message or "failed")
    return last, error.to_string()


class Progress:
    """Prints a line per step event of the run tagged `tag` (key, value) while the `with` block runs."""

    def __init__(
        self, instance: dg.DagsterInstance, tag: tuple[str, str], log: Callable[[str], None], poll_s: float = 0.5
    ):
        self.instance, self.tag, self.log, self.poll_s = instance, tag, log, poll_s
        self.run_id: str | None = None
        self.cursor: str | None = None
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="build-progress", daemon=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._drain()  # what arrived after the last poll
        except Exception:  # noqa: BLE001 - progress is a courtesy: never the reason a build fails
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._drain()
            except Exception:  # noqa: BLE001 - the storage busy for a moment: try again at the next poll
                continue

    def _drain(self) -> None:
        if self.run_id is None:
            runs = self.instance.get_runs(filters=dg.RunsFilter(tags={self.tag[0]: self.tag[1]}), limit=1)
            if not runs:
                return
            self.run_id = runs[0].run_id
        while True:
            conn = self.instance.get_records_for_run(self.run_id, cursor=self.cursor, of_type=KINDS, limit=200)
            for record in conn.records:
                self.log(self.line(record.event_log_entry))
            self.cursor = conn.cursor
            if not conn.has_more:
                return

    def line(self, entry) -> str:
        event = entry.dagster_event
        at = f"[build {entry.timestamp - self.t0:7.1f}s]"
        step = event.step_key or "run"
        kind = event.event_type
        if kind == E.STEP_START:
            return f"{at} {step} started"
        if kind == E.STEP_SUCCESS:
            ms = getattr(event.event_specific_data, "duration_ms", None)
            return f"{at} {step} done" + (f" in {ms / 1000:.1f}s" if ms is not None else "")
        if kind == E.STEP_SKIPPED:
            return f"{at} {step} not run (a step it needs failed)"
        reason, trace = failure_line(event)
        return f"{at} {step} FAILED: {reason}" + (f"\n{trace}" if trace else "")
