"""A bounded, crash-tolerant process-pool map for independent work inside a step: per-video decoding (extraction and
reconstruction), the split's per-source searches, the release path scan; `run_beside` runs one task in a worker
while the caller works (the release step's validity audit beside its exports).

`run_tasks(fn, tasks, ...)` calls `on_result(fn(task))` for every task, in completion order:
- workers == 1 (or a single task): in this process, no pool.
- otherwise a ProcessPoolExecutor with at most workers * in_flight tasks submitted at a time, so memory stays flat
  however many videos there are, and tasks are drawn lazily from the iterable.
- `fn` must not raise (it turns its own failures into results); if it does anyway, or a worker process dies
  (a decoder segfault), `on_failure(task, reason)` gives the result instead: after a crash the pool is rebuilt and
  each task that was in flight is retried alone, so one bad video only fails itself.
- every worker dies with the process that started the pool (`upstream_adapters.lifetime.die_with`), so a build
  killed with SIGKILL leaves no worker (and then no fork server) behind.
- inside a daemonic process, which may not start children (a Dask worker under its nanny: what `dask worker`
  starts by default), the same bounded map runs on threads (`children_allowed`): decoding and file reading release
  the GIL, and no step fails for where it runs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from contextlib import contextmanager
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable

from upstream_adapters.lifetime import die_with


# what BLAS (OpenBLAS, MKL) and OpenMP read when they load in a process: how many threads their pools start
NATIVE_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def limit_native_threads(n: int | None) -> None:
    """At most `n` threads in each BLAS / OpenMP pool of this process (threadpoolctl: the libraries already loaded)
    and of every process it starts from now on (the environment they read when they load). The build already runs a
    process per core (steps, pool workers); a BLAS pool of its own per core in each process only spins beside them
    (build.executor.native_threads). None: leave the libraries' defaults."""
    if n is None:
        return
    for var in NATIVE_THREAD_VARS:
        os.environ[var] = str(int(n))
    from threadpoolctl import threadpool_limits

    threadpool_limits(int(n))


def resolve_workers(workers: int | None) -> int:
    """None / 0 / negative -> number of cores."""
    return max(1, os.cpu_count() or 1) if not workers or workers <= 0 else int(workers)


def children_allowed() -> bool:
    """False in a daemonic process (multiprocessing refuses it children: `daemonic processes are not allowed to have
    children`), e.g. a Dask worker its nanny started."""
    return not mp.current_process().daemon


def _executor(n: int, ctx) -> ProcessPoolExecutor | ThreadPoolExecutor:
    if not children_allowed():
        return ThreadPoolExecutor(n, thread_name_prefix="pool")
    return ProcessPoolExecutor(n, mp_context=ctx, initializer=die_with, initargs=(os.getpid(),))


_WORKERS_CPU_S = [0.0]  # CPU seconds of the pool workers this process started and saw through (workers_cpu_s)


def workers_cpu_s() -> float:
    """CPU seconds (user + system, theirs and their children's) spent so far by the worker processes of this process's
    pools. A worker started by a fork server is the server's child, not this process's: RUSAGE_CHILDREN never sees
    it, so a step's cost (assets/definitions.py) adds this figure. Workers that are this process's own children are
    left out here (RUSAGE_CHILDREN counts them once they are joined); a worker that crashed is lost to both."""
    return _WORKERS_CPU_S[0]


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds of a live process of another parent (/proc/<pid>/stat: utime, stime, cutime, cstime); 0 when it
    cannot be read (gone, not Linux) or when it is this process's own child."""
    try:
        fields = open(f"/proc/{pid}/stat", encoding="ascii").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    if int(fields[1]) == os.getpid():  # joined at shutdown: RUSAGE_CHILDREN counts it
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _counted(pool):
    """The executor as a context manager that, as the work ends, adds its worker processes' CPU time to
    workers_cpu_s (read before the shutdown: the workers are idle by then and about to exit)."""
    with pool:
        try:
            yield pool
        finally:
            procs = getattr(pool, "_processes", None) or {}  # ProcessPoolExecutor's live workers; threads: none
            _WORKERS_CPU_S[0] += sum(_proc_cpu_s(pid) for pid in list(procs))


def _context(fn: Callable, mp_context: str | None):
    ctx = mp.get_context(mp_context) if mp_context else None
    if mp_context == "forkserver":
        # import the task's module once in the fork server, so each worker starts as a fork with it loaded
        # (effective only before this process's fork server starts; harmless afterwards)
        ctx.set_forkserver_preload([fn.__module__, die_with.__module__])
    return ctx


def _isolated(fn, task, ctx, on_failure):
    with _counted(_executor(1, ctx)) as pool:
        try:
            return pool.submit(fn, task).result()
        except BrokenProcessPool as exc:
            return on_failure(task, f"worker process crashed: {exc}")
        except Exception as exc:  # noqa: BLE001 - any failure of one task is its result, the others go on
            return on_failure(task, f"{type(exc).__name__}: {exc}")


def run_beside(
    fn: Callable, task, here: Callable[[], object], mp_context: str | None = "forkserver"
) -> tuple[object, object]:
    """`fn(task)` in one worker process while `here()` runs in this process: two pieces of work side by side with no
    third process idling on them (each holds hundreds of MB). Returns (here(), fn(task)); an exception of either,
    or the worker's crash (BrokenProcessPool), is raised once both are over."""
    with _counted(_executor(1, _context(fn, mp_context))) as pool:
        there = pool.submit(fn, task)
        return here(), there.result()


def run_tasks(
    fn: Callable,
    tasks: Iterable,
    workers: int | None,
    on_result: Callable[[object], None],
    on_failure: Callable[[object, str], object],
    mp_context: str | None = "forkserver",
    in_flight_per_worker: int = 2,
) -> None:
    n = resolve_workers(workers)
    if not isinstance(tasks, (list, tuple)):
        tasks = list(tasks) if n == 1 else tasks
    if n == 1 or (isinstance(tasks, (list, tuple)) and len(tasks) <= 1):
        for t in tasks:
            try:
                res = fn(t)
            except Exception as exc:  # noqa: BLE001 - any failure of one task is its result, the others go on
                res = on_failure(t, f"{type(exc).__name__}: {exc}")
            on_result(res)
        return
    if isinstance(tasks, (list, tuple)):
        n = min(n, len(tasks))
    ctx = _context(fn, mp_context)
    limit = n * max(1, int(in_flight_per_worker))
    it = iter(tasks)
    exhausted = False
    while not exhausted:
        pending: dict = {}
        broken: list = []
        with _counted(_executor(n, ctx)) as pool:
            while True:
                while not exhausted and not broken and len(pending) < limit:
                    try:
                        t = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    try:
                        pending[pool.submit(fn, t)] = t
                    except BrokenProcessPool:
                        broken.append(t)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    t = pending.pop(fut)
                    try:
                        on_result(fut.result())
                    except BrokenProcessPool:
                        broken.append(t)
                    except Exception as exc:  # noqa: BLE001 - fn raised, or its result did not unpickle
                        on_result(on_failure(t, f"{type(exc).__name__}: {exc}"))
                if broken:  # the pool is dead: every pending task fails the same way; retry them alone
                    broken.extend(pending.values())
                    pending.clear()
                    break
        for t in broken:
            on_result(_isolated(fn, t, ctx, on_failure))
