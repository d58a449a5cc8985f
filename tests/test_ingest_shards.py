"""A big source can be read by many workers: sources.<slug>.ingest_shards = n splits its ingest into n steps (a stable
hash of the unit id) and a step merging their IR. The merged IR must be the IR one whole ingest writes, byte for byte
in content and order, for every source; duplicates across shards are still noted; the graph has the shard steps."""

from __future__ import annotations

import polars as pl
import pytest

from assets.run import GraphMismatch, plan
from assets.settings import BuildSettings
from assets.tables import all_steps
from pipeline import stages
from pipeline.ingest.run import IR_TABLES, merge_shards, read_ir, shard_of

SLUGS = ["gm100", "rh20t", "reassemble", "aist"]


def test_shard_of_is_stable_and_spreads_units():
    ids = [f"task_{t:03d}__episode_{e:06d}" for t in range(20) for e in range(10)]
    shards = [shard_of(u, 4) for u in ids]
    assert shards == [shard_of(u, 4) for u in ids]  # no salted hash(): the same in every process
    assert shard_of("task_000__episode_000000", 4) == 0  # pinned: a changed hash would move units between shards
    assert min(shards.count(k) for k in range(4)) > 30


@pytest.mark.parametrize("slug", SLUGS)
def test_sharded_ingest_merges_into_the_whole_ir(slug, demo_samples, demo_release, tmp_path):
    work = tmp_path / "work"
    cfg = (
        BuildSettings(
            scale="demo",
            upstream={k: str(v) for k, v in demo_samples.items()},
            work_dir=str(work),
            release_dir=str(tmp_path / "release"),
        )
        .config()
        .with_values({f"sources.{slug}.ingest_shards": 3})
    )
    units = [stages.run_ingest_shard(cfg, slug, k)["units"] for k in range(3)]
    assert sum(units) and all(units)  # every shard got units of its own
    summary = stages.run_ingest(cfg, slug)
    whole = read_ir(demo_release.parent / "work" / "ir" / slug)
    merged = read_ir(work / "ir" / slug)
    for name in (*IR_TABLES, "quarantine", "notes", "absent"):
        assert merged[name].equals(whole[name]), f"{slug} {name}"
    assert summary["units"] == sum(units) == whole["units"].height
    assert (work / "ir" / slug / "corpus.json").read_text() == (
        demo_release.parent / "work" / "ir" / slug / "corpus.json"
    ).read_text()


def test_duplicates_across_shards_are_noted():
    def part(unit_id: str) -> dict[str, pl.DataFrame]:
        return {
            "units": pl.DataFrame({"unit_id": [unit_id], "content_hash": ["same"]}),
            "notes": pl.DataFrame(schema={"source": pl.String, "unit_id": pl.String, "note": pl.String}),
            **{
                t: pl.DataFrame({"unit_id": []}, schema={"unit_id": pl.String})
                for t in ("frames", "signals", "segments", "quarantine", "absent")
            },
        }

    merged = merge_shards("gm100", [part("b"), part("a")])
    assert merged.units["unit_id"].to_list() == ["a", "b"]
    assert merged.notes["unit_id"].to_list() == ["b"] and "same clock and signals as unit a" in merged.notes["note"][0]


def test_the_graph_has_a_step_per_shard_and_a_merge():
    from pipeline.settings.config import load_settings

    cfg = load_settings(scale="demo").with_values({"sources.gm100.ingest_shards": 2})
    steps = {s.name: s for s in all_steps(cfg)}
    assert {"ingest_gm100_0", "ingest_gm100_1", "ingest_gm100"} <= set(steps) and "ingest_aist_0" not in steps
    assert set(steps["ingest_gm100"].reads) == {t.name for k in (0, 1) for t in steps[f"ingest_gm100_{k}"].writes}
    assert steps["ingest_gm100_1"].writes[0].path == "ir/gm100/shards/1/units.parquet"
    from assets.checks import checks_for

    # the quarantine share is the merged IR's: on the merge step only
    assert [c.name for c in checks_for(steps["ingest_gm100"]) if c.name == "quarantine_share"]
    assert not [c.name for c in checks_for(steps["ingest_gm100_0"]) if c.name == "quarantine_share"]


def test_a_config_dir_cannot_change_the_job_graph(tmp_path):
    """The job's graph is built from the repository's configs/ when the definitions load; a --config-dir asking for
    shard steps the job lacks is refused, never run without them."""
    import shutil

    from pipeline.settings.config import CONFIG_DIR

    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    sources = configs / "sources.yaml"
    sources.write_text(sources.read_text().replace("  gm100:\n", "  gm100:\n    ingest_shards: 2\n", 1))
    with pytest.raises(GraphMismatch, match="ingest_gm100_0"):
        plan(
            BuildSettings(
                config_dir=str(configs), scale="demo", work_dir=str(tmp_path / "w"), release_dir=str(tmp_path / "r")
            )
        )
