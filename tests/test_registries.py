"""Contract tests of the export and check registries (pipeline/exports EXPORTERS, assets/tables.py Table.checks):
every registered export writes its files and declares its row count, is an asset of group `exports`, and an
exporter added by one registry line is built, written and shown; every table's declared checks exist and run."""

from __future__ import annotations

import csv
import io
import json
import shutil

import dagster as dg
import polars as pl
import pytest

from assets.checks import checks_for
from assets.tables import Table, TableCheck, all_steps, export_metadata, export_tables
from pipeline import exports
from pipeline.release.rows import read_tables
from pipeline.settings.config import load_settings
from pipeline.exports import EXPORTERS, Exporter, Output, common, write_exports


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


def rows_on_disk(root, rel: str) -> int:
    """The records a written export file holds, read back: jsonl lines, TSV rows, parquet rows, the items a
    Croissant file's record sets describe; 0 for metadata files."""
    path = root / rel
    if rel.endswith(".jsonl"):
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if rel.endswith(".tsv"):
        return sum(1 for _ in csv.reader(io.StringIO(path.read_text(encoding="utf-8")), delimiter="\t")) - 1
    if rel.endswith(".parquet"):
        return pl.read_parquet(path).height
    if rel == common.export_files(load_settings(scale="demo"))["croissant"]:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return sum(pl.read_parquet(root / d["contentUrl"]).height for d in doc["distribution"])
    return 0


def test_every_registered_export_writes_its_files_and_declares_its_rows(demo_release, cfg, tmp_path):
    release = tmp_path / "release"
    shutil.copytree(demo_release, release)
    tables = read_tables(release, cfg, levels=True)
    report = write_exports(release, tables["eval"], tables["sft"], cfg, checksums=False)
    assert list(report) == list(EXPORTERS)
    for name, ex in EXPORTERS.items():
        files = report[name]["files"]
        assert ex.main(cfg) in files, name
        assert all((release / f).is_file() for f in files), name
        assert report[name]["rows"] > 0, name
        assert report[name]["rows"] == sum(rows_on_disk(release, f) for f in files), name
    # the same bytes as the build wrote (every file the build's checksums list)
    listed = dict(line.split("  ", 1)[::-1] for line in (release / "checksums.sha256").read_text().splitlines())
    assert {f for r in report.values() for f in r["files"]} <= set(listed)


def test_every_export_is_an_asset_of_group_exports_with_its_row_count(cfg):
    from assets.definitions import defs

    graph = defs.resolve_asset_graph()
    for name in EXPORTERS:
        node = graph.get(dg.AssetKey(["exports", name]))
        assert node.group_name == "exports", name
    table = next(t for t in export_tables(cfg) if t.key[-1] == "grpo")
    assert export_metadata(table, {"exports": {"grpo": {"rows": 7, "files": 2}}}) == {
        "dagster/row_count": 7,
        "export/files": 2,
    }
    assert export_metadata(Table(("split", "summary"), "split/summary.json", "x"), {"exports": {}}) == {}


def test_an_exporter_is_one_registry_line(cfg, tmp_path, monkeypatch):
    """A new export: its function and one line in EXPORTERS; the release step writes it, the graph shows it."""

    def ids(p):
        yield Output(
            f"exports/ids/{p.part.name}.jsonl", common.jsonl([{"id": m.row["item_id"]} for m in p.rows]), len(p.rows)
        )

    monkeypatch.setitem(EXPORTERS, "ids", Exporter("item ids", lambda cfg: "exports/ids/train.jsonl", ids))
    assert "exports/ids" in {t.name for t in all_steps(cfg)[-1].writes}
    df = pl.DataFrame({"item_id": ["a"]})
    part = common.Part("sft", None, "train", df)
    got = list(
        exports.EXPORTERS["ids"].part(exports.PartRows(part, [common.ModelRow({"item_id": "a"}, "", [], [])], cfg))
    )
    assert [(o.rel, o.data, o.rows) for o in got] == [("exports/ids/train.jsonl", '{"id":"a"}\n', 1)]


def test_every_tables_checks_exist_and_run(demo_release, cfg):
    """Every check declared with a table is an asset check of the step that writes it, and runs on the demo build
    (passes, but a WARN check may warn); the checks of one table have distinct names."""
    cfg = cfg.with_values({"build.work_dir": str(demo_release.parent / "work"), "build.release_dir": str(demo_release)})
    steps = all_steps(cfg)
    declared = [(t.name, c) for s in steps for t in s.writes for c in t.checks]
    assert {"quarantine_share", "quotas_met", "no_group_in_both_splits", "release_valid", "validity_limits"} <= {
        c.name for _, c in declared
    }
    for step in steps:
        made = {(c.asset, c.name): c for c in checks_for(step)}
        for t in step.writes:
            assert len({c.name for c in t.checks}) == len(t.checks), t.name
            for c in t.checks:
                assert isinstance(c, TableCheck) and c.description
                check = made[(t.name, c.name)]
                passed, meta = check.run(cfg)
                assert isinstance(meta, dict)
                assert passed or c.warn, (t.name, c.name, meta)


def test_a_check_is_one_declaration_next_to_its_table(cfg, tmp_path):
    """A check declared on a table becomes that step's asset check and fails when its defect is planted."""
    flag = tmp_path / "defect"
    check = TableCheck("no_defect", "the defect file is absent", lambda cfg: (not flag.exists(), {}))
    step = all_steps(cfg)[0]
    table = step.writes[0]
    planted = type(step)(
        **{**step.__dict__, "writes": (Table(**{**table.__dict__, "checks": (check,)}), *step.writes[1:])}
    )
    made = next(c for c in checks_for(planted) if c.name == "no_defect")
    assert made.asset == table.name and made.evaluate(cfg).passed
    flag.write_text("x")
    res = made.evaluate(cfg)
    assert not res.passed and res.severity == dg.AssetCheckSeverity.ERROR
