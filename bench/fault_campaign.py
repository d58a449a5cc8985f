"""The fault campaign: every kind of hostile input or fault in the inventory bench/fault_kinds.yaml, run and counted
(issue 30; docs/faults.md).

    python bench/fault_campaign.py [--release DIR] [--no-tests] [--publish-kills N]        (make faults)

What runs:
- the inventory is checked first: every test it names exists, every campaign case below is in it and every case it
  names is one of them (a kind nobody plants is a problem, not a silent gap);
- bad inputs (the cases of every bench/fault_inputs_*.py, one file per kind of storage) are planted in small sample
  corpora and ingested: one is *handled* when ingest raises nothing, every good unit is still read, the bad
  container's units are all counted as lost (or absent) and each of its rows names a file and a reason;
- tampers are planted in a copy of a built release (--release; default release/ if there is one, else a demo release
  built in a temporary folder) and sealed again (checksums.sha256 re-written): one is *caught* when
  `validate_release` reports, without raising, a problem that names what was planted (each case says what its
  problem must say: a problem elsewhere that the edit set off by chance does not count). What the project writes itself (U+2028 in a text cell) must
  be *accepted*;
- the tests the inventory names, in one pytest run (unless --no-tests): a kind counts as handled when its campaign
  cases and all its tests pass. Bombs are read by tests/bombs.py `probe` in a fresh process under a memory limit
  (1 GiB of address space above its baseline); their peak RSS, logged by the probe, must stay under 1 GiB;
- --publish-kills N adds bench/fault_publish.py's kill -9 faults (N kill points over a build, N more within its
  release step, and a concurrent build).

Prints one line per case and per kind, then the table of counts per group. Exit 1 when the inventory is not in step
with the cases and tests, or a kind is not handled.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import polars as pl  # noqa: E402 - after sys.path names the repository
import yaml  # noqa: E402 - after sys.path names the repository

from pipeline.release import writers  # noqa: E402 - after sys.path names the repository
from pipeline.core import io as pio  # noqa: E402 - after sys.path names the repository
from pipeline.settings.config import load_settings  # noqa: E402 - after sys.path names the repository
from pipeline.ingest.run import ingest_source, units_lost  # noqa: E402 - after sys.path names the repository
from pipeline.publish.validate import validate_release  # noqa: E402 - after sys.path names the repository
from regen import build as build_demo  # noqa: E402 - after sys.path names the repository


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
            out.append(
                (case, ok, f"{res.units.height}/{good} good units read, {lost} lost counted (at least {lost_at_least})")
            )
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
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == 0)
            .then(pl.lit(deep))
            .otherwise(pl.col("frame_indices_json"))
            .alias("frame_indices_json")
        )
        pio.write_parquet(root / files["sft_parquet"], df)
        pio.write_jsonl(root / files["sft_jsonl"], df)

    def unit_id(char):
        def run(root):  # the id and every reference made from it, consistently (nothing else disagrees)
            from pipeline.release.schema import reconstruction_key_json, source_episode_ref, visual_ref

            df = pl.read_parquet(root / files["eval_parquet"])
            rows = df.to_dicts()
            r = rows[0]
            r["source_unit_id"] += char
            frames = json.loads(r["frame_indices_json"])
            key = (r["source_slug"], r["source_unit_type"], r["source_unit_id"])
            r["visual_ref"], r["source_episode_ref"] = visual_ref(*key, r["camera"], frames), source_episode_ref(*key)
            r["reconstruction_key_json"] = reconstruction_key_json(
                r["source_slug"], r["source_task_id"], *key[1:], r["camera"], frames
            )
            df = pl.DataFrame(rows, schema=df.schema)
            pio.write_parquet(root / files["eval_parquet"], df)
            pio.write_jsonl(root / files["eval_jsonl"], df)

        return run

    def sparse(root):
        with open(root / "metadata" / "huge.txt", "wb") as fh:
            fh.truncate(30 << 30)

    # case: (plant, what the problem that catches it says: caught means caught for this reason)
    return {
        "export: an answer changed": (answer, xf["grpo_eval"]),
        "export: image path ../../../../etc/passwd": (image_path, "image reference '../../../../etc/passwd'"),
        "export: a file no row gives": (
            lambda r: (r / xf["grpo_eval"]).with_name("extra.jsonl").write_text("{}\n"),
            "extra.jsonl: not an export",
        ),
        "provenance: a source dropped": (
            prov(lambda p: p["sources"].pop(sorted(p["sources"])[0])),
            files["provenance"],
        ),
        "provenance: units_listed lowered": (
            prov(lambda p: p["sources"][sorted(p["sources"])[0]].update(units_listed=1)),
            files["provenance"],
        ),
        "provenance: builder_version edited": (
            prov(lambda p: p.update(builder_version="other_v9")),
            "builder_version 'other_v9'",
        ),
        "provenance: from_sample_data flipped": (
            prov(lambda p: p.update(from_sample_data=not p["from_sample_data"])),
            "from_sample_data",
        ),
        "validity report: a baseline edited (json and md)": (validity, "validity_report.json"),
        "split jsonl: a key twice in one line": (dup_key, "duplicate key 'answer'"),
        "split: a cell nested 100,000 deep": (deep_cell, "frame_indices_json"),
        "split: a unit id with ESC[2J": (unit_id("\x1b[2J"), "source_unit_id"),
        "split: a unit id with a zero-width space": (unit_id("\u200b"), "source_unit_id"),
        "release: a 30 GB sparse file": (sparse, "max_file_bytes"),
    }


def tampers(release: Path, tmp: Path) -> tuple[list[tuple[str, bool, str]], list[tuple[str, bool, str]]]:
    cfg = load_settings()
    out, accepted = [], []
    for n, (case, (plant, needle)) in enumerate(_tampers(cfg).items()):
        copy = tmp / f"t{n}"
        shutil.copytree(release, copy)
        plant(copy)
        writers.write_checksums(copy, cfg) if case != "release: a 30 GB sparse file" else None
        try:
            problems = validate_release(copy, cfg, leaks=False)
            hit = next((p for p in problems if needle in p), None)
            out.append(
                (
                    case,
                    hit is not None,
                    (hit or (problems[0] if problems else "passed"))[:150]
                    + ("" if hit or not problems else f" (no problem says {needle!r})"),
                )
            )
        except Exception as exc:  # noqa: BLE001 - a raise is what the campaign counts
            out.append((case, False, f"raised {type(exc).__name__}"))
        shutil.rmtree(copy)
    copy = tmp / "accept"
    shutil.copytree(release, copy)
    files = writers.file_names(cfg)
    df = pl.read_parquet(copy / files["sft_parquet"])
    df = df.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.col("question") + "\u2028\u2029\u0085")
        .otherwise(pl.col("question"))
        .alias("question")
    )
    pio.write_parquet(copy / files["sft_parquet"], df)
    pio.write_jsonl(copy / files["sft_jsonl"], df)
    writers.write_checksums(copy, cfg)
    # the split files' own checks (the exports and the report, made from the old rows, differ: not counted here)
    problems = [
        p
        for p in validate_release(copy, cfg, leaks=False)
        if p.startswith((files["sft_jsonl"], files["sft_parquet"], "checksums"))
    ]
    accepted.append(
        (
            "split: U+2028/U+2029/U+0085 written by the project's writer",
            not problems,
            problems[0][:110] if problems else "accepted",
        )
    )
    return out, accepted


INVENTORY = Path(__file__).with_name("fault_kinds.yaml")
GROUPS = {
    "fault": ("faults", "survived"),
    "bad_input": ("bad inputs", "handled with a reason, no good unit lost"),
    "tamper": ("tampers", "caught"),
    "bomb": ("bombs", "refused, peak RSS < 1 GiB under the limit"),
    "accepted": ("the project's own writing", "accepted"),
}
ORIGINS = {
    "failures": "named in issue 30's failures 1-9",
    "build": "from issue 30's What to build",
    "earlier": "from the earlier campaign issue 30 re-ran",
    "campaign": "added by this repository",
}
BOMB_LOG = "PROCESSBENCH_BOMB_LOG"  # tests/bombs.py LOG_ENV


def load_inventory(path: Path = INVENTORY) -> list[dict]:
    kinds = yaml.safe_load(path.read_text(encoding="utf-8"))["kinds"]
    for k in kinds:
        k.setdefault("tests", [])
        k.setdefault("cases", [])
    return kinds


def _test_functions(test_file: Path) -> set[str]:
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def inventory_problems(kinds: list[dict], case_names: set[str]) -> list[str]:
    """Where the inventory and the repository disagree: a test it names that does not exist, a campaign case it
    names that the campaign does not plant, a case the campaign plants that it does not name, a kind nothing plants,
    an id twice, a group not counted."""
    out, seen, named = [], set(), set()
    for k in kinds:
        if k["id"] in seen:
            out.append(f"{k['id']}: id twice")
        seen.add(k["id"])
        if not (k["issue"] in set(ORIGINS) - {"failures"} or k["issue"] in range(1, 10)):
            out.append(
                f"{k['id']}: issue {k['issue']!r} is neither 1-9 nor one of {sorted(set(ORIGINS) - {'failures'})}"
            )
        if k["group"] not in GROUPS:
            out.append(f"{k['id']}: group {k['group']!r} is none of {sorted(GROUPS)}")
        if not k["tests"] and not k["cases"]:
            out.append(f"{k['id']}: no test and no campaign case plants it")
        for node in k["tests"]:
            file, _, func = node.partition("::")
            if not (REPO / file).is_file() or func.split("[")[0] not in _test_functions(REPO / file):
                out.append(f"{k['id']}: test {node} does not exist")
        for case in k["cases"]:
            named.add(case)
            if case not in case_names:
                out.append(f"{k['id']}: campaign case {case!r} is not planted by the campaign")
    out += [f"campaign case {c!r} is in no kind of {INVENTORY.name}" for c in sorted(case_names - named)]
    return out


def run_tests(nodes: list[str], tmp: Path) -> tuple[dict[str, str], list[dict]]:
    """One pytest run of `nodes`: ({node id as pytest names it: passed / failed / skipped}, the bomb probes' log)."""
    xml, log = tmp / "junit.xml", tmp / "bombs.jsonl"
    env = dict(os.environ, PYTHONHASHSEED="0", **{BOMB_LOG: str(log)})
    env.setdefault("DAGSTER_HOME", str(tmp / "dagster_home"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "--basetemp",
            str(tmp / "pytest"),
            *nodes,
        ],
        cwd=REPO,
        env=env,
    )
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped" and status == "passed":
                status = "skipped"
        outcomes[node] = status
    probes = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return outcomes, probes


def _matching(node: str, outcomes: dict[str, str]) -> list[str]:
    """The outcomes of a node id of the inventory (a function: every parametrisation)."""
    if "[" in node:
        return [outcomes[node]] if node in outcomes else []
    return [v for k, v in outcomes.items() if k == node or k.startswith(node + "[")]


def judge(kinds: list[dict], cases: dict[str, bool], outcomes: dict[str, str] | None, probes: list[dict]) -> list[dict]:
    """Per kind: {kind, ok: True / False / None when its tests were not run, seen: what was seen, cases / cases_ok,
    tests / tests_ok (its tests' outcomes: parametrisations count one each)}."""
    out = []
    for k in kinds:
        row = {"kind": k, "cases": len(k["cases"]), "cases_ok": sum(cases.get(c, False) for c in k["cases"])}
        results = [r for node in k["tests"] for r in _matching(node, outcomes or {})]
        row |= {"tests": len(results), "tests_ok": sum(r == "passed" for r in results)}
        ok = row["cases_ok"] == row["cases"]
        seen = [f"{row['cases_ok']}/{row['cases']} cases"] if k["cases"] else []
        if outcomes is None and k["tests"]:
            out.append(
                row | {"ok": None if ok else False, "seen": ", ".join(seen + [f"{len(k['tests'])} test(s) not run"])}
            )
            continue
        if k["tests"]:
            ok = ok and results != [] and all(r in ("passed", "skipped") for r in results) and row["tests_ok"] > 0
            skipped = results.count("skipped")
            seen.append(f"{row['tests_ok']}/{len(results)} tests passed" + (f", {skipped} skipped" if skipped else ""))
        if k["group"] == "bomb":
            funcs = {n.split("::")[1].split("[")[0] for n in k["tests"]}
            peaks = [
                p["maxrss_kb"] for p in probes if not p["lifted"] and p["test"].split("::")[-1].split("[")[0] in funcs
            ]
            ok = ok and bool(peaks) and max(peaks) < 1 << 20
            row["peak_kb"] = max(peaks, default=None)
            seen.append(
                f"peak RSS {max(peaks) / 1024:.0f} MiB over {len(peaks)} probe(s)" if peaks else "no probe logged"
            )
        out.append(row | {"ok": ok, "seen": ", ".join(seen)})
    return out


def publish_kills(points: int) -> tuple[int, int, str]:
    """bench/fault_publish.py's kill -9 faults: (tried, survived, its last line)."""
    res = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("fault_publish.py")),
            "--points",
            str(points),
            "--in-release",
            str(points),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONHASHSEED="0"),
    )
    m = re.search(r"faults tried (\d+), survived (\d+)", res.stdout)
    return (int(m[1]), int(m[2]), m[0]) if m else (1, 0, f"fault_publish.py exit {res.returncode}")


def demo_release(tmp: Path) -> Path:
    """A demo release built in `tmp` (the tampers need a full build: exports, provenance, the validity report)."""
    env = dict(os.environ, PYTHONHASHSEED="0", DAGSTER_HOME=str(tmp / "dagster_home"))
    return build_demo(tmp, env=env, capture=True)


def table(judged: list[dict], kills: tuple[int, int, str] | None) -> str:
    lines = [
        "| group | kinds | kinds run | kinds handled | campaign cases (handled) | tests (passed) | handled means |",
        "|---|---|---|---|---|---|---|",
    ]

    def counts(rows: list[dict]) -> str:
        ran = [r["ok"] for r in rows if r["ok"] is not None]
        return (
            f"{len(rows)} | {len(ran)} | {sum(ran)} | {sum(r['cases'] for r in rows)} "
            f"({sum(r['cases_ok'] for r in rows)}) | {sum(r['tests'] for r in rows)} "
            f"({sum(r['tests_ok'] for r in rows)})"
        )

    for group, (name, verb) in GROUPS.items():
        rows = [r for r in judged if r["kind"]["group"] == group]
        peak = max((r.get("peak_kb") or 0 for r in rows), default=0)
        lines.append(
            f"| {name} | {counts(rows)} | {verb}" + (f" (largest peak {peak / 1024:.0f} MiB)" if peak else "") + " |"
        )
    if kills:
        lines.append(
            f"| publish kills (fault_publish.py) | - | {kills[0]} | {kills[1]} | - | - | release intact, "
            "valid, nothing stray; a concurrent build refused |"
        )
    for origin, what in ORIGINS.items():
        rows = [
            r for r in judged if (r["kind"]["issue"] if isinstance(r["kind"]["issue"], str) else "failures") == origin
        ]
        lines.append(f"| of these: {what} | {counts(rows)} | |")
    lines.append(f"| all | {counts(judged)} | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", help="a built release to tamper with (a copy); default release/, else a demo build")
    ap.add_argument("--no-tests", action="store_true", help="run the campaign cases only; count the tests' kinds")
    ap.add_argument(
        "--publish-kills",
        type=int,
        default=0,
        metavar="N",
        help="also run bench/fault_publish.py: N kill points over a build and N within its release step",
    )
    a = ap.parse_args()
    logging.disable(logging.WARNING)
    kinds = load_inventory()
    tmp = Path(tempfile.mkdtemp(prefix="fault_campaign_"))
    try:
        inputs = bad_inputs(tmp)
        release = Path(a.release) if a.release else REPO / "release"
        release = release if release.is_dir() else demo_release(tmp / "demo")
        tamper, accept = tampers(release, tmp)
        for verb, miss, rows in (
            ("handled", "NOT HANDLED", inputs),
            ("caught", "NOT CAUGHT", tamper),
            ("accepted", "REFUSED", accept),
        ):
            for case, ok, seen in rows:
                print(f"{verb if ok else miss:12} {case}: {seen}")
        cases = {case: ok for case, ok, _ in inputs + tamper + accept}
        problems = inventory_problems(kinds, set(cases))
        outcomes, probes = (None, []) if a.no_tests else run_tests(sorted({n for k in kinds for n in k["tests"]}), tmp)
        judged = judge(kinds, cases, outcomes, probes)
        print()
        for r in judged:
            k = r["kind"]
            print(
                f"{'not run' if r['ok'] is None else 'handled' if r['ok'] else 'NOT HANDLED':12} {k['group']:9} "
                f"[{k['issue']}] {k['id']}: {r['seen']}"
            )
        kills = publish_kills(a.publish_kills) if a.publish_kills else None
        print("\n" + table(judged, kills))
        for p in problems:
            print(f"inventory: {p}")
        return 1 if problems or any(r["ok"] is False for r in judged) or (kills and kills[0] != kills[1]) else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
