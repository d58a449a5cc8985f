"""Run the `build` job from Python, in ONE Dagster run (what `processbench build` and `make rebuild` do).

Only the steps that are stale (assets/fingerprint.py: code, config or inputs changed, or an output is gone) and what
is downstream of them are selected; nothing stale means no run at all. The run goes to the instance of DAGSTER_HOME
(the CLI sets the repository's .dagster_home when unset); multiprocess and Dask need such a persistent instance.

The whole build, planning included, holds the build lock of its work and release folders (pipeline/publish/__init__.py); the
run's tags name the lock so that the run's executor (assets/executors.py) knows its launcher holds it. The release
step publishes the release only when every check passes; a failed run leaves the published release as it was.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import textwrap
import uuid

from pipeline import publish

from . import fingerprint
from .options import BuildOptions
from .tables import all_steps

if TYPE_CHECKING:
    import dagster as dg

    from pipeline.settings.root import Settings


class BuildFailed(RuntimeError):
    pass


class GraphMismatch(RuntimeError):
    """The config asks for steps the job does not have: the job's graph is built from the repository's configs/ when
    the definitions load (the UI shows it), and a config dir of a run can change settings, not the graph."""


def _failed_checks(result: dg.ExecutionResult, severity: dg.AssetCheckSeverity) -> list[str]:
    return check_texts(result.get_asset_check_evaluations(), severity)


def check_texts(evaluations, severity: dg.AssetCheckSeverity) -> list[str]:
    """The checks of this severity that did not pass (a run's AssetCheckEvaluations, from its result or its event
    log), each as the lines a person reads (assets/checks.py check_lines: what fell short, by how much, why, what to
    do, where the full record is), joined by newlines."""
    import dagster as dg

    from .checks import check_lines, sentences

    kind = "warning" if severity == dg.AssetCheckSeverity.WARN else "failed"
    out = []
    for ev in evaluations:
        if not ev.passed and ev.severity == severity:
            meta = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
            said = meta.get("sentences") if isinstance(meta.get("sentences"), list) else sentences(meta)
            advice, record = str(meta.get("what_to_do") or ""), meta.get("record")
            lines = check_lines(kind, ev.asset_key.to_user_string(), ev.check_name, said, advice, record)
            out.append("\n".join(lines))
    return out


def plan(settings: BuildOptions) -> list[str]:
    """Names of the steps the build must run for these settings (stale ones and their downstream)."""
    cfg = settings.config()
    return [s.name for s in fingerprint.stale_steps(job_steps(cfg), cfg)]


@cache
def _job_step_names() -> frozenset[str]:
    """The steps of the `build` job, whose graph assets/definitions.py builds from the repository's configs/ (the
    same registry call, without importing Dagster)."""
    from pipeline.settings.config import load_settings

    return frozenset(s.name for s in all_steps(load_settings()))


def job_steps(cfg: Settings):
    """The steps of the chosen sources, in order; GraphMismatch when the job lacks one."""
    steps = all_steps(cfg)
    unknown = sorted({s.name for s in steps} - _job_step_names())
    if unknown:
        raise GraphMismatch(
            f"steps {', '.join(unknown)} are not in the build job, whose graph comes from the "
            "repository's configs/: set sources.<slug>.ingest_shards there, not in a --config-dir"
        )
    return steps


def rebuild(
    settings: BuildOptions | None = None,
    instance: dg.DagsterInstance | None = None,
    log=print,
    log_level: str = "CRITICAL",
    executor: str | None = None,
    max_concurrent: int | None = None,
    dask_address: str | None = None,
    force: bool = False,
    token: str | None = None,
    verify: bool = False,
    cfg: Settings | None = None,
) -> dict:
    """Materialize what is stale in one run, under the build lock (publish.LockError when another build holds it);
    raise BuildFailed when a step fails (then the published release is unchanged). Returns the checks that failed
    with ERROR severity (`failed_checks`), those that only warn (`warnings`), the steps run, the run id, whether a
    new release was published (`published`) and what the lock cleaned up from killed builds (`cleaned`). `token`: the
    lock the caller holds already (the CLI takes it before writing sample corpora). `verify`: read every upstream
    file again instead of trusting its cached content hash (upstream_adapters/content_hash.py). `cfg`: the
    `settings.config()` the caller has made already (the CLI: the settings are read once per process)."""
    settings = settings or BuildOptions()
    cfg = cfg or settings.config()
    token = token or uuid.uuid4().hex
    fingerprint.use_hash_store(cfg, verify=verify)
    with publish.build_lock(cfg, token) as cleaned:
        for what in cleaned:
            log(f"[build] {what} (left by an interrupted build)")
        out = _rebuild(settings, cfg, token, instance, log, log_level, executor, max_concurrent, dask_address, force)
    return out | {"cleaned": cleaned}


def _rebuild(settings, cfg, token, instance, log, log_level, executor, max_concurrent, dask_address, force) -> dict:
    exec_cfg = cfg.build.executor
    engine = executor or exec_cfg.engine
    if damage := fingerprint.release_damage(cfg):  # the release step is then stale: it publishes the release again
        log(
            f"[build] the published release differs from its checksums ({len(damage)} file(s): "
            f"{'; '.join(damage[:5])}{' ...' if len(damage) > 5 else ''}): it is published again"
        )
    # under --force too: the plan reads (and with --verify re-reads) every upstream file
    steps = [s.name for s in fingerprint.stale_steps(job_steps(cfg), cfg)]
    steps = [s.name for s in job_steps(cfg)] if force else steps
    if not steps:
        log("[build] every step is up to date: nothing to run")
        return {"failed_checks": [], "warnings": [], "steps": [], "run_id": None, "published": False}
    # Dagster and the job's definitions only now: a build with nothing to run never imports them
    import dagster as dg

    from pipeline.core.pool import limit_native_threads

    from .definitions import STEPS, build_job
    from .executors import LOCK_TAG, run_config_for, start_fork_server, steps_die_with_this_process
    from .progress import Progress

    # the whole job: no selection, so no step process rebuilds a subset of the job for itself (~0.5 s each)
    keys = None if set(steps) == {s.name for s in STEPS} else [k for a in _assets_of(steps) for k in a.keys]
    run_config = {
        "loggers": {"console": {"config": {"log_level": log_level}}},
        "resources": {"build": {"config": settings.model_dump()}},
        "execution": {"config": run_config_for(engine, exec_cfg, max_concurrent, dask_address)},
    }
    # wrapped: no line of the build longer than a reader reads (issue 40: 200 characters)
    log(f"[build] one run, {engine} executor: {len(steps)} step(s):")
    for line in textwrap.wrap(", ".join(steps), 110):
        log(f"  {line}")
    before = publish.current_version(cfg)  # `published` says what happened to the release link, not the plan
    instance = instance or dg.DagsterInstance.get()
    # both before the fork server starts: its step processes inherit the thread limit and this process's pid
    limit_native_threads(exec_cfg.native_threads)
    with steps_die_with_this_process():
        if engine == "multiprocess":
            start_fork_server()  # its imports (~3 s) run while Dagster sets the run up, instead of after
        # Dagster's console logger stays quiet (log_level); one line per step start and end instead
        with (
            Progress(instance, (LOCK_TAG, token), log),
            dg.execute_job(
                dg.reconstructable(build_job),
                instance=instance,
                run_config=run_config,
                asset_selection=keys,
                raise_on_error=False,
                tags={LOCK_TAG: token},
            ) as res,
        ):
            failed = _failed_checks(res, dg.AssetCheckSeverity.ERROR)
            warnings = _failed_checks(res, dg.AssetCheckSeverity.WARN)
            if not res.success:
                failures = [e for e in res.all_events if e.is_failure]
                # the steps' own reasons; the run's failure only when no step said why (it repeats them)
                errors = [_failure_text(e) for e in ([e for e in failures if e.step_key] or failures)][:5]
                raise BuildFailed(
                    "\n".join([f"run {res.run_id} failed:", *map(_wrapped, errors + _held_units(cfg)), *failed])
                )
            return {
                "failed_checks": failed,
                "warnings": warnings,
                "steps": steps,
                "run_id": res.run_id,
                "published": publish.current_version(cfg) != before,
            }


def _held_units(cfg: Settings) -> list[str]:
    """The units ingest processes held when they died (pipeline/ingest/guard.py): a step killed while reading one
    names it instead of a bare crash."""
    from pipeline.ingest.guard import held_note
    from pipeline.settings.paths import work_dir

    ir = work_dir(cfg) / "ir"
    states = [(ir / s, s) for s in cfg.build.sources]
    states += [(p.with_suffix(""), p.parts[-3]) for p in sorted(ir.glob("*/shards/*.reading"))]
    return [note for state, slug in states if (note := held_note(state, slug))]


def _wrapped(text: str) -> str:
    """A step's failure or a held unit as indented lines under LINE_MAX."""
    from .checks import LINE_MAX, LINE_WIDTH

    lines = textwrap.wrap(text, LINE_WIDTH, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(ln if len(ln) <= LINE_MAX else ln[: LINE_MAX - 1] + "…" for ln in lines)


def _failure_text(event) -> str:
    """The error a failed step or run reported (a step's own message, e.g. why the release was not published)."""
    from .progress import failure_line

    return f"{event.step_key or 'run'}: {failure_line(event)[0]}"


def _assets_of(step_names: list[str]):
    from .definitions import ASSETS

    chosen = set(step_names)
    return [a for a in ASSETS if a.op.name in chosen]
