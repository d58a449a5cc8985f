"""Fault campaign for hostile metadata, lost containers and release tampering (issue 30's failures 6, 8 and 9; the
publish faults are bench/fault_publish.py, the size bombs tests/test_input_limits.py and tests/test_archive_limits.py).

    python bench/fault_campaign.py [--release DIR]

Bad inputs (the cases of every bench/fault_inputs_*.py, one file per kind of storage) are planted in small sample
corpora and ingested: one is *handled* when ingest raises nothing, every good
unit is still read, the bad container's units are all counted as lost (or absent) and each of its rows names a file
and a reason. Tampers are planted in a copy of a built release (default: release/, which `make rebuild` writes; the
checks of exports, provenance and the validity report need a full build) and sealed again (checksums.sha256
re-written): one is *caught* when `validate_release` reports a problem without raising. What the project writes
itself (U+2028 in a text cell) must be *accepted*. Prints one line per case and the counts. Numbers, not
pass/fail: the tests assert the mechanisms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402 - after sys.path names the repository

from pipeline import writers  # noqa: E402 - after sys.path names the repository
from pipeline import io as pio  # noqa: E402 - after sys.path names the repository
from pipeline.config import load_settings  # noqa: E402 - after sys.path names the repository
from pipeline.ingest import ingest_source, units_lost  # noqa: E402 - after sys.path names the repository
from pipeline.validate import validate_release  # noqa: E402 - after sys.path names the repository

def bad_inputs(tmp: Path) -> list[tuple[str, bool, str]]:
    """(case, handled, what was seen) per bad input of every bench/fault_inputs_*.py."""
    cfg = load_settings()
    out = []
    for path in sorted(Path(__file__).parent.glob("fault_inputs_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for case, slug, root, good, lost_at_least, undo in module.cases(tmp / path.stem):
            try:
                res = ingest_source(slug, root, cfg.sources[slug].adapter.options())
            except Exception as exc:  # noqa: BLE001 - a raise is what the campaign counts
                out.append((case, False, f"raised {type(exc).__name__}: {exc}"))
                continue
            finally:
                for fn in undo:
                    fn()
            lost = units_lost(res.quarantine) + res.absent.height
            named = all(r["reason"] and (r["file"] or r["unit_id"] != "*") for r in res.quarantine.to_dicts())
            ok = res.units.height == good and lost >= lost_at_least and named
            out.append((case, ok, f"{res.units.height}/{good} good units read, {lost} lost counted "
                                  f"(at least {lost_at_least})"))
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _put_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _tampers(cfg) -> dict:
    from pipeline.exports import common
    from pipeline.validity import write_report

    xf, files = common.export_files(cfg), writers.file_names(cfg)

    def answer(root):
        rows = _jsonl(root / xf["grpo_eval"])
        rows[0]["solution"] = "<answer>Z</answer>"
        _put_jsonl(root / xf["grpo_eval"], rows)

    def image_path(root):
        rows = _jsonl(root / xf["llamafactory_sft"])
        rows[0]["images"][0] = "../../../../etc/passwd"
        _put_jsonl(root / xf["llamafactory_sft"], rows)

    def prov(edit):
        def run(root):
            p = json.loads((root / files["provenance"]).read_text())
            edit(p)
            pio.write_json(root / files["provenance"], p)
        return run

    def validity(root):
        path = root / "metadata" / "validity_report.json"
        rep = json.loads(path.read_text())
        cell = next(c for c in rep["cells"] if c.get("eval_n"))
        cell["random"] = 0.0123
        write_report(rep, root / "metadata")

    def dup_key(root):
        path = root / files["sft_jsonl"]
        lines = path.read_text(encoding="utf-8").split("\n")
        lines[0] = lines[0][:-1] + ', "answer": "Z"}'
        path.write_text("\n".join(lines), encoding="utf-8")

    def deep_cell(root):
        df = pl.read_parquet(root / files["sft_parquet"])
        deep = "[" * 100_000 + "]" * 100_000
        df = df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(deep))
                             .otherwise(pl.col("frame_indices_json")).alias("frame_indices_json"))
        pio.write_parquet(root / files["sft_parquet"], df)
        pio.write_jsonl(root / files["sft_jsonl"], df)

    def sparse(root):
        with open(root / "metadata" / "huge.txt", "wb") as fh:
            fh.truncate(30 << 30)

    return {
        "export: an answer changed": answer,
        "export: image path ../../../../etc/passwd": image_path,
        "export: a file no row gives": lambda r: (r / xf["grpo_eval"]).with_name("extra.jsonl").write_text("{}\n"),
        "provenance: a source dropped": prov(lambda p: p["sources"].pop(sorted(p["sources"])[0])),
        "provenance: units_listed lowered": prov(lambda p: p["sources"][sorted(p["sources"])[0]].update(
            units_listed=1)),
        "provenance: builder_version edited": prov(lambda p: p.update(builder_version="other_v9")),
        "provenance: from_sample_data flipped": prov(lambda p: p.update(from_sample_data=not p["from_sample_data"])),
        "validity report: a baseline edited (json and md)": validity,
        "split jsonl: a key twice in one line": dup_key,
        "split: a cell nested 100,000 deep": deep_cell,
        "release: a 30 GB sparse file": sparse,
    }


def tampers(release: Path, tmp: Path) -> tuple[list[tuple[str, bool, str]], list[tuple[str, bool, str]]]:
    cfg = load_settings()
    out, accepted = [], []
    for n, (case, plant) in enumerate(_tampers(cfg).items()):
        copy = tmp / f"t{n}"
        shutil.copytree(release, copy)
        plant(copy)
        writers.write_checksums(copy, cfg) if case != "release: a 30 GB sparse file" else None
        try:
            problems = validate_release(copy, cfg, leaks=False)
            out.append((case, bool(problems), problems[0][:110] if problems else "passed"))
        except Exception as exc:  # noqa: BLE001 - a raise is what the campaign counts
            out.append((case, False, f"raised {type(exc).__name__}"))
        shutil.rmtree(copy)
    copy = tmp / "accept"
    shutil.copytree(release, copy)
    files = writers.file_names(cfg)
    df = pl.read_parquet(copy / files["sft_parquet"])
    df = df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.col("question") + "\u2028\u2029\u0085")
                         .otherwise(pl.col("question")).alias("question"))
    pio.write_parquet(copy / files["sft_parquet"], df)
    pio.write_jsonl(copy / files["sft_jsonl"], df)
    writers.write_checksums(copy, cfg)
    # the split files' own checks (the exports and the report, made from the old rows, differ: not counted here)
    problems = [p for p in validate_release(copy, cfg, leaks=False)
                if p.startswith((files["sft_jsonl"], files["sft_parquet"], "checksums"))]
    accepted.append(("split: U+2028/U+2029/U+0085 written by the project's writer", not problems,
                     problems[0][:110] if problems else "accepted"))
    return out, accepted


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", default=str(REPO / "release"), help="a built release to tamper with (a copy)")
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="fault_campaign_"))
    try:
        inputs = bad_inputs(tmp)
        for case, ok, seen in inputs:
            print(f"{'handled' if ok else 'NOT HANDLED':12} {case}: {seen}")
        tamper, accept = tampers(Path(a.release), tmp) if Path(a.release).is_dir() else ([], [])
        for case, ok, seen in tamper:
            print(f"{'caught' if ok else 'NOT CAUGHT':12} {case}: {seen}")
        for case, ok, seen in accept:
            print(f"{'accepted' if ok else 'REFUSED':12} {case}: {seen}")
        print(f"bad inputs: tried {len(inputs)}, handled {sum(ok for _, ok, _ in inputs)}")
        print(f"tampers: tried {len(tamper)}, caught {sum(ok for _, ok, _ in tamper)}")
        print(f"project's own writing: tried {len(accept)}, accepted {sum(ok for _, ok, _ in accept)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
