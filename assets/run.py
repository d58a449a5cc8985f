"""Materialize the whole graph through Dagster from Python (what `processbench build` and `make rebuild` run).

Per-source assets run once per source partition, then the split and release assets; asset checks run with their
assets. Runs go to the instance of DAGSTER_HOME when set (so `make dev` shows their history), else an ephemeral one.
"""

from __future__ import annotations

import json
import os

import dagster as dg

from .definitions import ASSETS, CHECKS, PER_SOURCE, BuildSettings, split, release


class BuildFailed(RuntimeError):
    pass


def _instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()


def _failed_checks(result: dg.ExecuteInProcessResult, severity: dg.AssetCheckSeverity) -> list[str]:
    out = []
    for ev in result.get_asset_check_evaluations():
        if not ev.passed and ev.severity == severity:
            meta = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
            out.append(f"{ev.asset_key.to_user_string()}:{ev.check_name} {meta}")
    return out


def rebuild(settings: BuildSettings | None = None, instance: dg.DagsterInstance | None = None, log=print,
            log_level: str = "WARNING") -> dict:
    """Materialize every asset; raise BuildFailed when a step fails. Returns the checks that failed with ERROR
    severity (`failed_checks`) and those that only warn (`warnings`, e.g. a family short of its quota)."""
    settings = settings or BuildSettings()
    cfg = settings.config()
    instance = instance or _instance()
    resources = {"build": settings}
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    failed: list[str] = []
    warnings: list[str] = []
    for slug in cfg["build"]["sources"]:  # settings.sources narrows it
        log(f"[build] {slug}: ingest -> labels -> candidates -> frames")
        res = dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(*PER_SOURCE),
                             partition_key=slug, resources=resources, instance=instance, raise_on_error=False,
                             run_config=run_config)
        if not res.success:
            raise BuildFailed(f"per-source assets failed for {slug}")
        failed += _failed_checks(res, dg.AssetCheckSeverity.ERROR)
        warnings += _failed_checks(res, dg.AssetCheckSeverity.WARN)
    log("[build] split -> release")
    res = dg.materialize([*ASSETS, *CHECKS], selection=dg.AssetSelection.assets(split, release),
                         resources=resources, instance=instance, raise_on_error=False, run_config=run_config)
    failed += _failed_checks(res, dg.AssetCheckSeverity.ERROR)
    warnings += _failed_checks(res, dg.AssetCheckSeverity.WARN)
    if not res.success:
        raise BuildFailed("split/release failed: " + "; ".join(failed))
    return {"failed_checks": failed, "warnings": warnings}


def settings_from(config_dir: str = "", scale: str = "", upstream: dict | None = None, work_dir: str = "",
                  release_dir: str = "", sources: list[str] | None = None) -> BuildSettings:
    return BuildSettings(config_dir=config_dir, scale=scale, upstream_json=json.dumps(upstream or {}),
                         work_dir=work_dir, release_dir=release_dir, sources=",".join(sources or []))
