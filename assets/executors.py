"""One executor for the `build` job that runs it on an existing engine chosen by run config:

    execution: {config: {multiprocess: {max_concurrent: 2}}}      the default: one process per step on this host
    execution: {config: {in_process: {}}}                          every step in the run's process
    execution: {config: {dask: {cluster: {local: {n_workers: 2}}}}} dagster-dask on a local Dask cluster
    execution: {config: {dask: {cluster: {existing: {address: "tcp://scheduler:8786"}}}}}   a real cluster

It delegates to Dagster's own in_process/multiprocess executors and to dagster-dask's, so the job the UI shows is the
job `processbench build` runs, whatever the engine. (dagster-k8s and dagster-celery executors plug in the same way:
docs/running.md.) Whatever the engine, the whole run holds the build lock of its work and release folders
(pipeline/publish/__init__.py): the executor is the one piece of Dagster that lives for the whole run in one process, for a run
the UI launched as for `processbench build` (whose CLI holds the lock already and names it in the run's tags).
"""

import os
from contextlib import contextmanager

import dagster as dg
from dagster._core.definitions.executor_definition import multiple_process_executor_requirements
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster_dask import dask_executor

from pipeline import publish

from pipeline.settings.models import BuildExecutor

from .settings import BuildSettings

LOCK_TAG = "processbench/lock"  # the token of the lock the launching CLI holds
BUILD_PID_ENV = "PROCESSBENCH_BUILD_PID"  # the pid of the `processbench build` process, inherited by its step processes
_watched: set[int] = set()
# what every step imports: the job, its assets, pipeline/, the adapters; and the instance's default (SQLite) storage,
# which each step process would otherwise import itself (~1.4 s: SQLAlchemy, Alembic) to write its events.
# (The fork server skips a module that does not import.)
PRELOAD = ("assets.definitions", "dagster._core.storage.sqlite_storage", "dagster._core.instance.factory")
ENGINE_MODULE = "dagster._core.executor.multiprocess"  # which Dagster adds to the preload list itself


@contextmanager
def steps_die_with_this_process():
    """Around a run launched by `processbench build`: its step processes (multiprocess executor, local Dask workers)
    inherit this process's pid and end as soon as it is gone, kill -9 included (`watch_the_build`); without it they
    are re-parented and run their step to the end as orphans."""
    before = os.environ.get(BUILD_PID_ENV)
    os.environ[BUILD_PID_ENV] = str(os.getpid())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BUILD_PID_ENV, None)
        else:
            os.environ[BUILD_PID_ENV] = before


def start_fork_server() -> None:
    """Start the multiprocess engine's fork server now, with what the engine would preload: the executor finds it
    running and forks its steps from it. Its environment is what every step process gets (call it inside
    `steps_die_with_this_process`)."""
    import multiprocessing as mp
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload([ENGINE_MODULE, *PRELOAD])
    forkserver.ensure_running()


def watch_the_build() -> None:
    """First thing in every step: a step process of a `processbench build` run dies with that build. A no-op in the
    build process itself (in_process executor) and in runs the UI launched (Dagster's run worker ends their steps)."""
    from upstream_adapters.lifetime import die_with

    pid = os.environ.get(BUILD_PID_ENV, "")
    if pid.isdigit() and int(pid) != os.getpid() and int(pid) not in _watched:
        _watched.add(int(pid))  # one watch per process (a Dask worker runs many steps)
        die_with(int(pid))


ENGINES: dict[str, dg.ExecutorDefinition] = {
    "in_process": dg.in_process_executor,
    "multiprocess": dg.multiprocess_executor,
    "dask": dask_executor,
}


def _requirements(config):
    return [] if "in_process" in (config or {}) else multiple_process_executor_requirements()


@dg.executor(
    name="processbench_executor",
    config_schema=dg.Field(
        dg.Selector(
            {
                k: v.config_schema.as_field() if hasattr(v.config_schema, "as_field") else v.config_schema
                for k, v in ENGINES.items()
            }
        ),
        default_value={"multiprocess": {}},
    ),
    requirements=_requirements,
)
def build_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    ((kind, config),) = init_context.executor_config.items()
    engine = ENGINES[kind]
    if kind == "multiprocess" and "start_method" not in config:
        # step processes fork from a server that imported the definitions and the storage once: a step starts in
        # ~0.3 s instead of ~4 s of interpreter start and imports (18 steps in a build)
        config = {**config, "start_method": {"forkserver": {"preload_modules": list(PRELOAD)}}}
    if kind == "dask":  # local Dask workers must be allowed children: the frames stage's decode pool
        import dask

        dask.config.set({"distributed.worker.daemon": False})
    return LockedExecutor(
        engine.executor_creation_fn(init_context._replace(executor_def=engine, executor_config=config))
    )


class LockedExecutor(dg.Executor):
    """The engine's executor, run under the build lock of the run's work and release folders: a second build on the
    same folders fails at once with the holder's pid and start time, instead of mixing its tables into this one."""

    def __init__(self, inner: dg.Executor):
        self.inner = inner

    @property
    def retries(self):
        return self.inner.retries

    @property
    def step_dependency_config(self):
        return self.inner.step_dependency_config

    def execute(self, plan_context, execution_plan):
        conf = ((plan_context.run_config.get("resources") or {}).get("build") or {}).get("config") or {}
        cfg = BuildSettings(**conf).config()
        token = plan_context.dagster_run.tags.get(LOCK_TAG) or plan_context.run_id
        with publish.build_lock(cfg, token) as cleaned:
            for what in cleaned:
                plan_context.log.info(f"build lock: {what}")
            # the engine sees itself as the plan's executor (dagster-dask insists on it)
            inner_context = PlanOrchestrationContext(
                plan_data=plan_context.plan_data,
                log_manager=plan_context.log,
                executor=self.inner,
                output_capture=plan_context.output_capture,
                resume_from_failure=plan_context.resume_from_failure,
            )
            yield from self.inner.execute(inner_context, execution_plan)


def run_config_for(
    engine: str,
    cfg_executor: BuildExecutor | None = None,
    max_concurrent: int | None = None,
    address: str | None = None,
) -> dict:
    """The `execution` run-config fragment for an engine name (configs/build.yaml `executor`, or --executor)."""
    cfg_executor = cfg_executor or BuildExecutor()
    if engine == "in_process":
        return {"in_process": {}}
    if engine == "multiprocess":
        n = max_concurrent if max_concurrent is not None else cfg_executor.max_concurrent
        return {"multiprocess": {"max_concurrent": int(n or 0)}}
    if engine == "dask":
        address = address or cfg_executor.dask_address or ""
        if address:
            return {"dask": {"cluster": {"existing": {"address": address}}}}
        n = max_concurrent if max_concurrent is not None else cfg_executor.max_concurrent
        local = {
            "n_workers": int(n) if n else None,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
        }
        return {
            "dask": {
                "cluster": {"local": {k: v for k, v in local.items() if v is not None} | {"dashboard_address": None}}
            }
        }
    raise ValueError(f"unknown executor {engine!r}; known: {sorted(ENGINES)}")
