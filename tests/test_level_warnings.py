"""A corpus too small to fill an eval level (L2 or L3 holds 0 items) was refused by a blocking statistics check; now
it is a recorded warning (a WARN check, provenance.json `warnings`, the card's "Build warnings") and the release is
published, while the checks of what makes a release wrong (rows per level as split_summary.json says) still block."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import polars as pl
import pytest

from assets.definitions import CHECKS
from pipeline import stages
from pipeline.settings.config import load_settings
from pipeline.publish.validate import validate_release


@pytest.fixture
def small(demo_release, tmp_path):
    return too_small_for_l3(demo_release, tmp_path)


def too_small_for_l3(demo_release, tmp_path):
    """The demo build's work folder as a corpus too small for RH20T's L3: its L3 items gone, its summary saying so."""
    work, release = tmp_path / "work", tmp_path / "release"
    shutil.copytree(demo_release.parent / "work", work, ignore=shutil.ignore_patterns("_fingerprints"))
    cfg = load_settings(scale="demo").with_values({"build.work_dir": str(work), "build.release_dir": str(release)})
    items = pl.read_parquet(work / "split" / "items.parquet")
    gone = (pl.col("source") == "rh20t") & (pl.col("eval_level") == "L3")
    assert items.filter(gone).height
    items.filter(~gone.fill_null(False)).write_parquet(work / "split" / "items.parquet")
    path = work / "split" / "summary.json"
    summary = json.loads(path.read_text())
    summary["sources"]["rh20t"]["ood"]["levels"]["L3"]["items"] = 0
    # the counts the release recomputes from its rows (the split stage's words are checked against them)
    for key in ("eval_items", "total_items"):
        summary.pop(key)
    keep = {"ood", "group_unit", "merge_keys", "method", "rule", "objective"}
    summary["sources"]["rh20t"] = {k: v for k, v in summary["sources"]["rh20t"].items() if k in keep}
    path.write_text(json.dumps(summary))
    return cfg, release


def test_an_unfilled_level_warns_and_the_release_records_it(small):
    cfg, release = small
    every = [c for checks in CHECKS.values() for c in checks]
    counts = next(c for c in every if c.name == "eval_level_counts")
    shares = next(c for c in every if c.name == "eval_level_shares")
    assert counts.evaluate(cfg).passed  # the rows are what the summary says
    res = shares.evaluate(cfg)
    assert not res.passed and shares.severity == dg.AssetCheckSeverity.WARN and not shares.blocking
    warning = res.metadata["problems"].value[0]
    assert warning.startswith("rh20t: L3 holds 0 items")
    stages.run_release(cfg)
    prov = json.loads((release / "metadata" / "provenance.json").read_text())
    assert prov["warnings"] == [warning]
    card = (release / "README.md").read_text()
    assert "## Build warnings" in card and f"- {warning}\n" in card
    manifests = sorted((release / "metadata").glob("eval*manifest.json"))
    assert len(manifests) >= 2 and all(json.loads(m.read_text())["warnings"] == [warning] for m in manifests)
    assert "warnings" not in json.loads((release / "metadata" / "sft_manifest.json").read_text())
    assert validate_release(release, cfg, leaks=False) == []
    # the eval manifest's record must agree with provenance.json's: one that drops it is caught
    from pipeline.core import io as pio
    from pipeline.release import writers

    path = release / "metadata" / "eval_manifest.json"
    kept = path.read_text()
    pio.write_json(path, {k: v for k, v in json.loads(kept).items() if k != "warnings"})
    writers.write_checksums(release, cfg)
    assert any("eval_manifest.json: lacks warnings" in p for p in validate_release(release, cfg, leaks=False))
    path.write_text(kept)
    # the card's record must agree with provenance.json's: a card that drops it is caught
    (release / "README.md").write_text(card.replace(f"- {warning}\n", ""))
    writers.write_checksums(release, cfg)
    assert any("README.md: differs from the export" in p for p in validate_release(release, cfg, leaks=False))
