"""`processbench diff` (pipeline/release/diff.py) on hand-made cells and on releases written by the writers: it counts
kept, added, removed and moved items per cell, names exactly the cells whose items differ, and refuses what is not a
readable release of this format in one line (exit 2); identical releases exit 0."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import polars as pl

from factories import build_identified, make_items
from pipeline.core.digests import REPO
from pipeline.release.diff import cell_table, diff_releases


def _placed(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["item_uid", "track", "source", "family", "place"], orient="row")


def test_diff_cells_count_kept_added_removed_and_moved_items():
    old = _placed(
        [
            ("u1", "mcq", "gm100", "T1", "L1"),
            ("u2", "mcq", "gm100", "T1", "L1"),
            ("u3", "mcq", "gm100", "T1", "sft"),
            ("u4", "mcq", "gm100", "T2", "L1"),
            ("u5", "mcq", "rh20t", "T1", "L2"),
        ]
    )
    new = _placed(
        [
            ("u1", "mcq", "gm100", "T1", "L1"),
            ("u2", "mcq", "gm100", "T1", "sft"),  # moved out of eval
            ("u3", "mcq", "gm100", "T1", "sft"),
            ("u6", "mcq", "gm100", "T2", "L1"),  # u4 replaced
            ("u5", "mcq", "rh20t", "T1", "L2"),
        ]
    )
    cells = {(r["source"], r["family"], r["place"]): r for r in cell_table(old, new).iter_rows(named=True)}
    assert {
        k: (v["old"], v["new"], v["kept"], v["added"], v["removed"], v["moved_in"], v["moved_out"])
        for k, v in cells.items()
    } == {
        ("gm100", "T1", "L1"): (2, 1, 1, 0, 0, 0, 1),
        ("gm100", "T1", "sft"): (1, 2, 1, 0, 0, 1, 0),
        ("gm100", "T2", "L1"): (1, 1, 0, 1, 1, 0, 0),
        ("rh20t", "T1", "L2"): (1, 1, 1, 0, 0, 0, 0),
    }
    assert [k for k, v in cells.items() if v["same_items"]] == [("rh20t", "T1", "L2")]


def test_diff_of_two_releases_names_exactly_the_cells_whose_items_differ(identified_release, tmp_path):
    out, cfg, fp = identified_release
    same = diff_releases(out, out, cfg)
    assert same["identical"] and same["items"]["kept"] == same["items"]["old"]
    other = tmp_path / "other"
    items = make_items()
    # one T2 item of rh20t reworded: its uid changes, nothing else
    target = items.filter((pl.col("source") == "rh20t") & (pl.col("task_id") == "T2"))["candidate_key"][0]
    items = items.with_columns(
        pl.when(pl.col("candidate_key") == target)
        .then(pl.lit("Reworded?"))
        .otherwise(pl.col("question"))
        .alias("question")
    )
    build_identified(other, cfg, items=items)
    doc = diff_releases(out, other, cfg)
    assert not doc["identical"]
    changed = [(c["source"], c["family"], c["place"]) for c in doc["cells"] if not c["comparable"]]
    assert len(changed) == 1 and changed[0][:2] == ("rh20t", "T2")
    cell = next(c for c in doc["cells"] if not c["comparable"])
    assert (cell["added"], cell["removed"], cell["kept"]) == (1, 1, cell["old"] - 1)
    assert doc["items"]["added"] == doc["items"]["removed"] == 1 and doc["items"]["moved"] == 0


def _diff_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "assets.cli", "diff", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def test_diff_cli_exit_codes_and_bad_input(identified_release, tmp_path):
    out, cfg, _ = identified_release
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    r = _diff_cli(str(out), str(copy), "--out", str(tmp_path / "report"))
    assert r.returncode == 0, r.stderr
    assert "Identical" in r.stdout and json.loads((tmp_path / "report" / "diff.json").read_text())["identical"]
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("not a release\n")
    pq = copy / "splits" / "processbench_eval.parquet"
    pq.write_bytes(pq.read_bytes()[:100])
    for bad, words in (
        (tmp_path / "missing", ("missing", "not a folder")),
        (tmp_path / "plain", ("plain", "not a ProcessBench release")),
        (copy, ("processbench_eval.parquet", "truncated")),
    ):
        r = _diff_cli(str(out), str(bad))
        assert r.returncode == 2, (bad, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and all(w in lines[0] for w in words), r.stderr
