"""The Dagster graph of the ProcessBench build, generated from the step registry (assets/tables.py).

    per source:  ir/<slug>/* ─▶ labels/<slug>/* ─▶ candidates/<slug> ─▶ items/<slug>, gate_quarantine/<slug>
    all sources: items/*, ir/*/units ─▶ split/items, split/groups, split/summary ─▶ release/<file>

One asset per table; one multi-asset (one step) per call of a pipeline.stages function. The four sources' chains
are separate steps, so ONE run of the `build` job runs them in parallel (multiprocess by default; in_process or Dask
by run config, see assets/executors.py). A step whose code, config and inputs are unchanged is skipped
(assets/fingerprint.py); its data version is its fingerprint. Each step evaluates the checks of the tables it
writes (assets/checks.py): generated schema checks and the stage's own. The release step writes into a staging
folder and publishes it only when every ERROR check of the build passes (`_publish_step`): a run launched from the UI
cannot publish a bad release any more than `processbench build` can.
"""

import resource
import time
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from pipeline import publish
from pipeline.settings.config import load_settings
from pipeline.core.errors import EXPLAINED
from pipeline.core.pool import limit_native_threads, workers_cpu_s

from . import fingerprint
from .checks import checks_for, publish_problems, table_metadata
from .executors import build_executor, watch_the_build
from .settings import BuildSettings
from .tables import Step, all_steps, export_metadata, tables_by_name

from pipeline.settings.root import Settings
from pipeline.settings import paths

CFG = load_settings()
STEPS = all_steps(CFG)
TABLES = tables_by_name(STEPS)


def _key(name: str) -> dg.AssetKey:
    return dg.AssetKey(name.split("/"))


def _summary_meta(summary: dict) -> dict:
    return {
        f"summary/{k}": (v if isinstance(v, (int, float, str)) else dg.MetadataValue.json(v))
        for k, v in summary.items()
    }


def _peak_rss_mb() -> int:
    """The largest resident set of this process or one of its finished children (the decode pool): what a step needs
    (in the in_process engine: the whole build's process so far)."""
    return round(
        max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024
    )


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process, of its children that ended and of its pools' workers (children
    of a fork server: pipeline/core/pool.py workers_cpu_s): the difference over a step is what the step cost,
    whatever the engine (bench/bench_build.py reports it per step)."""
    own = sum(
        r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    return own + workers_cpu_s()


def _op_tags(step: Step) -> dict[str, str]:
    """The step's source, and its priority when more steps are ready than can run (build.executor.priority)."""
    tags = {"source": step.source or "all"}
    priority = CFG.build.executor.priority.get(step.source or "", 0)
    return tags | ({"dagster/priority": str(priority)} if priority else {})


def step_asset(step: Step) -> dg.AssetsDefinition:
    specs = [
        dg.AssetSpec(
            _key(t.name),
            deps=[_key(r) for r in step.reads],
            description=t.description,
            group_name=t.group or step.group,
            kinds={"parquet" if t.path.endswith(".parquet") else "file"},
            tags={"source": step.source} if step.source else None,
        )
        for t in step.writes
    ]

    checks = checks_for(step)

    @dg.multi_asset(
        name=step.name,
        specs=specs,
        check_specs=[c.spec() for c in checks],
        description=step.description,
        can_subset=False,
        op_tags=_op_tags(step),
    )
    def _asset(context: dg.AssetExecutionContext, build: BuildSettings):
        watch_the_build()
        cfg = build.config()
        # a run the UI launched, a Dask worker, the in_process engine: the same threads as a `processbench build`
        limit_native_threads(cfg.build.executor.native_threads)
        # the step as the chosen sources define it (split and release read only those): the same fingerprint the
        # planner in assets/run.py computed
        live = all_steps(cfg)
        this = next((s for s in live if s.name == step.name), step)
        if step.publishes and not fingerprint.is_fresh(this, cfg, tables_by_name(live)):
            yield from _publish_step(context, this, cfg, live, checks)
            return
        t0, c0 = time.monotonic(), _cpu_s()
        with project_failure():
            summary, skipped, fp = fingerprint.run_step(this, cfg, tables_by_name(live))
        context.log.info(f"{step.name}: {'unchanged, skipped' if skipped else 'computed'} ({fp[:12]})")
        cost = _cost(t0, c0)
        for t in step.writes:
            yield dg.MaterializeResult(
                asset_key=_key(t.name),
                data_version=dg.DataVersion(fp[:16]),
                metadata={
                    **table_metadata(t, cfg),
                    **_summary_meta(summary),
                    **export_metadata(t, summary),
                    "skipped": skipped,
                    **cost,
                },
            )
        for check in checks:
            yield check.evaluate(cfg)

    return _asset


def _cost(t0: float, c0: float) -> dict:
    """What a step cost since (monotonic time, _cpu_s) = (t0, c0): its materializations' metadata."""
    return {
        "step/seconds": round(time.monotonic() - t0, 1),
        "step/cpu_s": round(_cpu_s() - c0, 1),
        "step/peak_rss_mb": _peak_rss_mb(),
    }


@contextmanager
def project_failure():
    """A failure the project explains itself (pipeline/core/errors.py ProjectError) fails the step with its one line as the
    failure description, which the UI shows and `processbench build` prints, without a trace."""
    try:
        yield
    except EXPLAINED as exc:
        raise dg.Failure(description=str(exc), metadata={"error": type(exc).__name__}) from None


def _publish_step(context, step: Step, cfg: Settings, live: list[Step], checks):
    """Run the release step into the staging folder, evaluate its checks there and every other ERROR check of the
    build on the work folder, and swap the staging folder in only when all pass. Otherwise the published release
    stays as it was and the step fails, saying why (the check results are still reported)."""
    t0, c0 = time.monotonic(), _cpu_s()
    staged = publish.staging_config(cfg)
    publish.clear_staging(cfg)
    try:
        with project_failure():
            summary, _, fp = fingerprint.run_step(step, staged, tables_by_name(live))
        # side by side: the validator re-reads the release in this process while the path scan's pool reads every
        # file (threads suffice: polars and the pool's waits release the GIL)
        with ThreadPoolExecutor(max(1, len(checks))) as pool:
            results = list(pool.map(lambda c: c.evaluate(staged), checks))
    except BaseException:  # a release step that raised leaves nothing beside the release (a killed one: the next
        publish.clear_staging(cfg)  # build's lock cleans up)
        raise
    problems = [
        f"{r.asset_key.to_user_string()}:{r.check_name}"
        for r in results
        if not r.passed and r.severity == dg.AssetCheckSeverity.ERROR
    ]
    problems += publish_problems(cfg, [s for s in live if s.name != step.name])
    if problems:
        fingerprint.forget(step, cfg)  # the next build runs the release again
        publish.clear_staging(cfg)
        yield from results
        raise dg.Failure(
            description=f"release not published: {len(problems)} check(s) failed: "
            f"{', '.join(problems[:10])}; the previous release in "
            f"{paths.release_dir(cfg).name}/ is unchanged",
            metadata={"failed_checks": dg.MetadataValue.json(problems)},
        )
    publish.publish(cfg)
    context.log.info(f"release published to {paths.release_dir(cfg).name}/")
    # read once more, now that its checks have let it settle: the files' hashes go to the content-hash store, so the
    # next build with nothing to do stats the release instead of reading it (docs/running.md)
    fingerprint.release_damage(cfg)
    cost = _cost(t0, c0)  # the step, its checks and the publishing
    for t in step.writes:
        yield dg.MaterializeResult(
            asset_key=_key(t.name),
            data_version=dg.DataVersion(fp[:16]),
            metadata={
                **table_metadata(t, cfg),
                **_summary_meta(summary),
                **export_metadata(t, summary),
                "skipped": False,
                "published": True,
                **cost,
            },
        )
    yield from results


ASSETS = [step_asset(s) for s in STEPS]
CHECKS = {s.name: checks_for(s) for s in STEPS}
BUILD_JOB = dg.define_asset_job(
    "build",
    selection=dg.AssetSelection.all(),
    executor_def=build_executor,
    description="The whole build in one run: the four sources' chains in parallel, then "
    "split and release; checks run with their assets.",
)

# executor=: every job, Dagster's implicit asset job too (the UI's "Materialize all" or any asset selection), runs
# on the locked executor: no run writes the work or release folder without the build lock
defs = dg.Definitions(assets=ASSETS, resources={"build": BuildSettings()}, jobs=[BUILD_JOB], executor=build_executor)


def build_job() -> dg.JobDefinition:
    """The `build` job, resolved: the entry point `dg.reconstructable` hands to other processes."""
    return defs.resolve_job_def("build")
