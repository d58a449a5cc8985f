"""The validator checks every file derived from the release rows (exports, provenance.json, the validity report) and
reads every file in bounded memory. Each test plants one defect the validator passed before (a consistent edit:
checksums.sha256 re-written to match) and sees it caught."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import shutil
from pathlib import Path

import pytest

from factories import build, make_cfg
from pipeline.release import writers
from pipeline.core import io
from pipeline.settings.config import load_settings
from pipeline.exports import common
from pipeline.publish.validate import validate_release
from pipeline.publish.validate_derived import ref_problem
from pipeline.publish.validate_files import utf8_problem

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


@pytest.fixture(scope="module")
def cfg():
    return load_settings(scale="demo")


@pytest.fixture()
def copy(demo_release, tmp_path) -> Path:
    out = tmp_path / "rel"
    shutil.copytree(demo_release, out)
    return out


def _reseal(root: Path, cfg: Settings) -> None:
    writers.write_checksums(root, cfg)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _has(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


def test_the_demo_release_passes_the_derived_checks(demo_release, cfg):
    assert validate_release(demo_release, cfg, leaks=False) == []


def test_an_answer_changed_in_an_export_is_caught(copy, cfg):
    rel = common.export_files(cfg)["grpo_eval"]
    rows = _jsonl(copy / rel)
    rows[0]["solution"] = "<answer>Z</answer>"
    _write_jsonl(copy / rel, rows)
    tsv = copy / common.export_files(cfg)["vlmevalkit_eval"]
    lines = tsv.read_text(encoding="utf-8").split("\n")
    head = lines[0].split("\t")
    cells = lines[1].split("\t")
    cells[head.index("answer")] = "F" if cells[head.index("answer")] != "F" else "E"
    lines[1] = "\t".join(cells)
    tsv.write_text("\n".join(lines), encoding="utf-8")
    _reseal(copy, cfg)
    problems = validate_release(copy, cfg, leaks=False)
    assert _has(problems, rel, "differs from the export the release rows give")
    assert _has(problems, common.export_files(cfg)["vlmevalkit_eval"], "differs from the export")


def test_a_path_like_image_reference_is_refused(copy, cfg):
    rel = common.export_files(cfg)["llamafactory_sft"]
    rows = _jsonl(copy / rel)
    rows[2]["images"][0] = "../../../../etc/passwd"
    _write_jsonl(copy / rel, rows)
    _reseal(copy, cfg)
    problems = validate_release(copy, cfg, leaks=False)
    assert _has(problems, f"{rel}:3: image reference '../../../../etc/passwd'", "'..' part")
    assert ref_problem("images/pb_v2_eval_000001_0.png") is None
    for bad in (
        "/etc/passwd",
        "~/x.png",
        "C:\\x.png",
        "file:///etc/passwd",
        "images//x.png",
        "./x.png",
        "images/x\u200b.png",
        "",
    ):
        assert ref_problem(bad), bad


def test_an_export_the_rows_do_not_give_is_caught(copy, cfg):
    extra = copy / cfg.exports.dir / "grpo" / "extra.jsonl"
    extra.write_text('{"images": []}\n', encoding="utf-8")
    (copy / common.export_files(cfg)["swift_sft"]).unlink()
    _reseal(copy, cfg)
    problems = validate_release(copy, cfg, leaks=False)
    assert _has(problems, "grpo/extra.jsonl: not an export of these rows")
    assert _has(problems, common.export_files(cfg)["swift_sft"], "missing export")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda p: p["sources"].pop("aist"), "the rows use source aist, which it does not list"),
        (lambda p: p["sources"]["gm100"].update(units_listed=1), "source gm100 lists 1 units"),
        (lambda p: p["sources"]["rh20t"].update(name="Other"), "source rh20t is named 'Other'"),
        (lambda p: p.update(builder_version="someone_else_v9"), "builder_version 'someone_else_v9'"),
        (lambda p: p.update(from_sample_data=not p["from_sample_data"]), "from_sample_data"),
        (lambda p: p["sources"]["gm100"].update(origin="user", samples=None), "user corpus without its content"),
    ],
)
def test_a_consistent_edit_of_provenance_is_caught(copy, cfg, edit, needle):
    rel = writers.file_names(cfg)["provenance"]
    p = json.loads((copy / rel).read_text(encoding="utf-8"))
    edit(p)
    io.write_json(copy / rel, p)
    _reseal(copy, cfg)
    assert _has(validate_release(copy, cfg, leaks=False), rel, needle)


def test_a_consistent_edit_of_the_validity_report_is_caught(copy, cfg):
    from pipeline.validity import write_report

    path = copy / "metadata" / "validity_report.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in report["cells"] if c.get("eval_n"))
    key = next(k for k in ("random", "label_prior", "memoriser") if isinstance(cell.get(k), (int, float)))
    cell[key] = 0.0123
    write_report(report, copy / "metadata")  # json and md together, as the build writes them
    _reseal(copy, cfg)
    problems = validate_release(copy, cfg, leaks=False)
    assert _has(problems, "validity_report.json: cell", "differs from its rows", key)
    report["problems"] = []
    report["warnings"] = ["planted"]
    path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _reseal(copy, cfg)
    problems = validate_release(copy, cfg, leaks=False)
    assert _has(problems, "validity_report.md: is not the rendering of")
    assert _has(problems, "validity_report.json: warnings are not what its cells give")


@pytest.mark.parametrize("where", ["stray", "replacing"])
def test_a_30gb_sparse_file_is_reported_without_reading_it(tmp_path, where):
    """A 30 GB sparse file gave the validator a MemoryError (every text file was read whole); now a file past
    release.max_file_bytes is named with its size and never read, and every other file is read a block at a time."""
    build(tmp_path)
    cfg = make_cfg()
    rel = "metadata/huge.txt" if where == "stray" else writers.file_names(cfg)["schema"]
    path = tmp_path / rel
    path.unlink(missing_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(30 << 30)
    assert path.stat().st_size == 30 << 30
    problems = validate_release(tmp_path, cfg)
    assert _has(problems, rel, f"{30 << 30} bytes, past release.max_file_bytes")
    path.unlink()


def test_text_files_are_decoded_a_block_at_a_time(tmp_path, monkeypatch):
    import pipeline.publish.validate_files as vf

    monkeypatch.setattr(vf, "BLOCK", 4)
    p = tmp_path / "t.txt"
    p.write_bytes("ab\u00e9\u2028cd".encode() + b"\xff" + b"x")  # é and U+2028 cut across blocks: still UTF-8
    assert utf8_problem(p) == "byte 0xff at offset 9"
    p.write_bytes("ab\u00e9\u2028cd".encode())
    assert utf8_problem(p) is None


def test_a_deeply_nested_cell_is_a_problem_not_a_recursion_error(tmp_path):
    """A release cell nested 100,000 deep stopped the validator with RecursionError; now it is a row problem."""
    import polars as pl

    build(tmp_path)
    cfg = make_cfg()
    files = cfg.release.files.model_dump()
    df = pl.read_parquet(tmp_path / files["sft_parquet"])
    deep = "[" * 100_000 + "]" * 100_000
    df = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(deep)).otherwise(pl.col(c)).alias(c)
        for c in ("frame_indices_json", "render_spec_json")
    )
    io.write_parquet(tmp_path / files["sft_parquet"], df)
    io.write_jsonl(tmp_path / files["sft_jsonl"], df)
    _reseal(tmp_path, cfg)
    problems = validate_release(tmp_path, cfg)
    assert _has(problems, "frame_indices_json is not a canonical non-empty JSON list")
