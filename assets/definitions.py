"""The Dagster graph of the ProcessBench build, generated from the step registry (assets/tables.py).

    per source:  ir/<slug>/* ─▶ labels/<slug>/* ─▶ candidates/<slug> ─▶ items/<slug>, gate_quarantine/<slug>
    all sources: items/*, ir/*/units ─▶ split/items, split/groups, split/summary ─▶ release/<file>

One asset per table; one multi-asset (one step) per call of a pipeline.stages function. The four sources' chains
are separate steps, so ONE run of the `build` job runs them in parallel (multiprocess by default; in_process or Dask
by run config, see assets/executors.py). A step whose code, config and inputs are unchanged is skipped
(assets/fingerprint.py); its data version is its fingerprint. Each step evaluates the checks of the tables it
writes (assets/checks.py): generated schema checks and the stage's own.
"""


import dagster as dg

from pipeline.config import load_config

from . import fingerprint
from .checks import checks_for, table_metadata
from .executors import build_executor
from .settings import BuildSettings
from .tables import Step, all_steps, tables_by_name

CFG = load_config()
STEPS = all_steps(CFG)
TABLES = tables_by_name(STEPS)


def _key(name: str) -> dg.AssetKey:
    return dg.AssetKey(name.split("/"))


def _summary_meta(summary: dict) -> dict:
    return {f"summary/{k}": (v if isinstance(v, (int, float, str)) else dg.MetadataValue.json(v))
            for k, v in summary.items()}


def step_asset(step: Step) -> dg.AssetsDefinition:
    specs = [dg.AssetSpec(_key(t.name), deps=[_key(r) for r in step.reads], description=t.description,
                          group_name=step.group, kinds={"parquet" if t.schema is not None else "file"},
                          tags={"source": step.source} if step.source else None)
             for t in step.writes]

    checks = checks_for(step)

    @dg.multi_asset(name=step.name, specs=specs, check_specs=[c.spec() for c in checks],
                    description=step.description, can_subset=False, op_tags={"source": step.source or "all"})
    def _asset(context: dg.AssetExecutionContext, build: BuildSettings):
        cfg = build.config()
        # the step as the chosen sources define it (split and release read only those): the same fingerprint the
        # planner in assets/run.py computed
        live = all_steps(cfg)
        summary, skipped, fp = fingerprint.run_step(next((s for s in live if s.name == step.name), step), cfg,
                                                    tables_by_name(live))
        context.log.info(f"{step.name}: {'unchanged, skipped' if skipped else 'computed'} ({fp[:12]})")
        for t in step.writes:
            yield dg.MaterializeResult(asset_key=_key(t.name), data_version=dg.DataVersion(fp[:16]),
                                       metadata={**table_metadata(t, cfg), **_summary_meta(summary),
                                                 "skipped": skipped})
        for check in checks:
            yield check.evaluate(cfg)
    return _asset


ASSETS = [step_asset(s) for s in STEPS]
CHECKS = {s.name: checks_for(s) for s in STEPS}
BUILD_JOB = dg.define_asset_job("build", selection=dg.AssetSelection.all(), executor_def=build_executor,
                                description="The whole build in one run: the four sources' chains in parallel, then "
                                            "split and release; checks run with their assets.")

defs = dg.Definitions(assets=ASSETS, resources={"build": BuildSettings()}, jobs=[BUILD_JOB])


def build_job() -> dg.JobDefinition:
    """The `build` job, resolved: the entry point `dg.reconstructable` hands to other processes."""
    return defs.resolve_job_def("build")
