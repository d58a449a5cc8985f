"""The Dagster graph of the ProcessBench build: one asset per stage, thin wrappers over pipeline.stages.

    ingest ─▶ labels ─▶ candidates ─▶ frames      (partitioned by source)
                                         └──▶ split ─▶ release

Every asset reads the merged YAML config through the `build` resource and writes into the work / release
folders; the computing happens in pipeline/. Asset checks fail loudly on leakage, schema, counts, path leaks
and quarantine share.
"""


import json

import dagster as dg
import polars as pl

from pipeline import stages
from pipeline.config import load_config

SOURCES = dg.StaticPartitionsDefinition(list(load_config()["build"]["sources"]))


class BuildSettings(dg.ConfigurableResource):
    """Which configuration the build uses. Empty fields mean: the repository's configs/ and its defaults."""

    config_dir: str = ""
    scale: str = ""  # demo | release; empty = configs/build.yaml
    upstream_json: str = "{}"  # {"gm100": "/data/gm100", ...}: upstream roots overriding configs/sources.yaml
    work_dir: str = ""
    release_dir: str = ""
    sources: str = ""  # comma-separated subset of build.sources; empty = all

    def config(self) -> dict:
        cfg = load_config(self.config_dir or None, upstream=json.loads(self.upstream_json or "{}"),
                          scale=self.scale or None)
        if self.work_dir:
            cfg["build"]["work_dir"] = self.work_dir
        if self.release_dir:
            cfg["build"]["release_dir"] = self.release_dir
        if self.sources:
            cfg["build"]["sources"] = [s for s in cfg["build"]["sources"] if s in self.sources.split(",")]
        return cfg


def _meta(summary: dict) -> dict:
    return {k: (v if isinstance(v, (int, float, str)) else dg.MetadataValue.json(v)) for k, v in summary.items()}


@dg.asset(partitions_def=SOURCES, group_name="ingest", kinds={"python", "parquet"})
def ingest(context: dg.AssetExecutionContext, build: BuildSettings) -> dg.MaterializeResult:
    """Read one upstream source through its adapter into the episode IR (units, frames, signals, segments) and a
    quarantine table of the units that could not be read."""
    summary = stages.run_ingest(build.config(), context.partition_key)
    return dg.MaterializeResult(metadata=_meta(summary))


@dg.asset(partitions_def=SOURCES, deps=[ingest], group_name="labels", kinds={"python", "parquet"})
def labels(context: dg.AssetExecutionContext, build: BuildSettings) -> dg.MaterializeResult:
    """Per-frame process labels (phase, contact, direction, motion state, coordination, local steps, outcome,
    primitive chains) from the IR signals and annotations, with thresholds from configs/labels.yaml."""
    return dg.MaterializeResult(metadata=_meta(stages.run_labels(build.config(), context.partition_key)))


@dg.asset(partitions_def=SOURCES, deps=[labels], group_name="items", kinds={"python", "parquet"})
def candidates(context: dg.AssetExecutionContext, build: BuildSettings) -> dg.MaterializeResult:
    """The over-complete pool of candidate items of every task family from the YAML templates in configs/tasks/."""
    return dg.MaterializeResult(metadata=_meta(stages.run_candidates(build.config(), context.partition_key)))


@dg.asset(partitions_def=SOURCES, deps=[candidates], group_name="frames", kinds={"python", "parquet"})
def frames(context: dg.AssetExecutionContext, build: BuildSettings) -> dg.MaterializeResult:
    """Select the quota of items, decode exactly their frames into the content-addressed cache, drop items that fail
    the visual gate (unreadable, black, frozen) with replacements, assign balanced answer letters, hash the images."""
    return dg.MaterializeResult(metadata=_meta(stages.run_frames(build.config(), context.partition_key)))


@dg.asset(deps=[frames], group_name="split", kinds={"python", "parquet"})
def split(build: BuildSettings) -> dg.MaterializeResult:
    """Group items by isolation unit (merged by stricter keys when the policy asks) and choose eval groups per source,
    stratified per family and answer letter (configs/split.yaml)."""
    return dg.MaterializeResult(metadata=_meta(stages.run_split(build.config())))


@dg.asset(deps=[split], group_name="release", kinds={"python", "parquet"})
def release(build: BuildSettings) -> dg.MaterializeResult:
    """The release folder: eval/SFT parquet + jsonl in the public row schema, manifests, metadata, checksums."""
    return dg.MaterializeResult(metadata=_meta(stages.run_release(build.config())))


# ------------------------------------------------------------------------------------------------ checks
def _partition(context: dg.AssetCheckExecutionContext) -> str | None:
    """The source of the run the check executes in (None: check every source)."""
    return context.partition_key if context.has_partition_key else None


@dg.asset_check(asset=ingest,
                description="Quarantined units stay under build.max_quarantine_share of the source's units.")
def quarantine_share(context: dg.AssetCheckExecutionContext, build: BuildSettings) -> dg.AssetCheckResult:
    cfg = build.config()
    limit = cfg["build"]["max_quarantine_share"]
    shares = stages.quarantine_shares(cfg, _partition(context))
    worst = {s: v for s, v in shares.items() if v > limit}
    return dg.AssetCheckResult(passed=not worst, metadata={"shares": shares, "limit": limit, "over": worst})


@dg.asset_check(asset=frames, description="Every family reaches its quota for this source (a shortfall is reported, "
                "never padded; it warns rather than fails, since small corpora may lack candidates).")
def quotas_met(context: dg.AssetCheckExecutionContext, build: BuildSettings) -> dg.AssetCheckResult:
    short = stages.shortfall(build.config(), _partition(context))
    return dg.AssetCheckResult(passed=not short, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"shortfall": dg.MetadataValue.json(short)})


@dg.asset_check(asset=split, blocking=True, description="No split group (or merged group) has items on both sides.")
def no_group_in_both_splits(build: BuildSettings) -> dg.AssetCheckResult:
    leaked = stages.leaked_groups(build.config())
    return dg.AssetCheckResult(passed=not leaked, metadata={"leaked_groups": leaked[:50], "n_leaked": len(leaked)})


@dg.asset_check(asset=split, description="Per-source eval group counts are the configured round(eval_ratio × groups).")
def eval_group_counts(build: BuildSettings) -> dg.AssetCheckResult:
    problems = stages.eval_group_count_problems(build.config())
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": problems})


@dg.asset_check(asset=release, blocking=True,
                description="The release validates: schema, parquet == jsonl, counts across files, checksums, isolation.")
def release_valid(build: BuildSettings) -> dg.AssetCheckResult:
    problems = stages.release_problems(build.config())
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": problems[:50], "n_problems": len(problems)})


@dg.asset_check(asset=release, description="No absolute path, user name or host name in any release file.")
def release_path_free(build: BuildSettings) -> dg.AssetCheckResult:
    leaks = stages.release_path_leaks(build.config())
    return dg.AssetCheckResult(passed=not leaks, metadata={"leaks": leaks[:50]})


ASSETS = [ingest, labels, candidates, frames, split, release]
CHECKS = [quarantine_share, quotas_met, no_group_in_both_splits, eval_group_counts, release_valid, release_path_free]
PER_SOURCE = [ingest, labels, candidates, frames]

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    resources={"build": BuildSettings()},
    jobs=[dg.define_asset_job("rebuild_sources", selection=dg.AssetSelection.assets(*PER_SOURCE)),
          dg.define_asset_job("rebuild_release", selection=dg.AssetSelection.assets(split, release))],
)
