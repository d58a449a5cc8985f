"""The step track's gate table at release scale (docs/steps.md "Blind gates at release scale"): builds each source
alone at release scale from its release-scale sample corpus, then prints the blind gates of pipeline/steps/gates.py
(pooled, per class of wrong step, shared frames) and the step counts against the quota, as markdown.

    python bench/step_gates.py [--sources aist,reassemble] [--samples DIR] [--work DIR]
    python bench/step_gates.py --release reassemble=RELEASE_DIR ...     # only measure releases already built
    make bench-steps [BENCH_STEPS_ARGS="--sources reassemble"]

Each source is built with `nice -n 19 processbench build --scale release --sources S --upstream S=<samples>/S`
into <work>/<S>/{work,release} (the work folder is kept between runs: its frame cache and unchanged steps are
reused, so a rebuild after a change of the step track only re-runs the steps, the release and the audit). The
samples are generated first where missing (`processbench samples --scale release`). The gates are recomputed from
the release's step files with the code of this checkout (the validity report of the release holds the same
figures when built by it). Sources one at a time: GM-100 takes about half an hour cold on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.settings.config import load_settings  # noqa: E402
from pipeline.steps.gates import (  # noqa: E402
    GATE_COLUMNS,
    class_table,
    frames_table,
    gate_problems,
    pooled_table,
    step_gates,
)
from pipeline.steps.tables import read_step_tables  # noqa: E402


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("processbench")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "assets.cli"]


def build_source(slug: str, samples: Path, work: Path) -> tuple[Path, float]:
    """Build one source at release scale (samples generated when missing); returns its release folder and seconds."""
    corpus = samples / slug
    if not corpus.is_dir():
        subprocess.run(
            ["nice", "-n", "19", *_cli(), "samples", "--scale", "release", "--sources", slug, "--out", str(samples)],
            check=True,
        )
    out = work / slug
    t0 = time.monotonic()
    subprocess.run(
        [
            "nice",
            "-n",
            "19",
            *_cli(),
            "build",
            "--scale",
            "release",
            "--sources",
            slug,
            "--upstream",
            f"{slug}={corpus}",
            "--work-dir",
            str(out / "work"),
            "--release-dir",
            str(out / "release"),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return out / "release", time.monotonic() - t0


def measure(release: Path, cfg) -> dict:
    tables = read_step_tables(release, cfg, columns=GATE_COLUMNS)
    if tables is None:
        raise SystemExit(f"{release}: no step files (a release of the step track was expected)")
    return step_gates(tables["eval"], tables["sft"], cfg.validity.steps)


def counts(release: Path) -> dict:
    path = release / "metadata" / "steps_manifest.json"
    return json.loads(path.read_text(encoding="utf-8")).get("sources", {}) if path.is_file() else {}


def merge(reports: list[dict]) -> dict:
    out = dict(reports[0])
    for key in ("cells", "classes", "frames"):
        out[key] = [c for r in reports for c in r.get(key, [])]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", default=None, help="comma-separated (default: the T13 template's sources)")
    ap.add_argument("--samples", type=Path, default=ROOT / "build" / "samples" / "release")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "bench_steps")
    ap.add_argument("--release", action="append", default=[], metavar="SLUG=DIR", help="measure only (repeatable)")
    args = ap.parse_args(argv)
    cfg = load_settings(scale="release")
    tpl = next(iter(cfg.step_tasks.values()))
    releases: dict[str, Path] = {}
    seconds: dict[str, float] = {}
    for spec in args.release:
        slug, _, path = spec.partition("=")
        releases[slug] = Path(path)
    if not releases:
        if shutil.which("nice") is None:
            raise SystemExit("bench/step_gates.py: `nice` not found (the builds run at the lowest priority)")
        for slug in args.sources.split(",") if args.sources else list(tpl.sources):
            releases[slug], seconds[slug] = build_source(slug, args.samples.resolve(), args.work.resolve())
    reports = [measure(rel, cfg) for rel in releases.values()]
    report = merge(reports)
    print("## Step items (release scale, sample corpora)\n")
    print("| source | items | quota | steps | scored | wrong | natural share of wrong | build s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    scale = float(cfg.build.quota_scale["release"])
    for slug, rel in releases.items():
        c = counts(rel).get(slug, {})
        quota = round(int(tpl.quota.get(slug, 0)) * scale)
        print(
            f"| {slug} | {c.get('items', '–')} | {quota} | {c.get('steps', '–')} | {c.get('scored_steps', '–')} "
            f"| {c.get('wrong_steps', '–')} | {c.get('natural_error_share', '–')} | "
            f"{round(seconds[slug]) if slug in seconds else '–'} |"
        )
    for title, table in (
        ("Pooled gates (eval cells)", pooled_table),
        ("Per class of wrong step (cross-fitted by split group)", class_table),
        ("Steps sharing a frame with another step of their item", frames_table),
    ):
        print(f"\n## {title}\n")
        print("\n".join(table(report)))
    found = gate_problems(report, cfg.validity.steps)
    print("\n## Problems\n")
    print("\n".join(f"- {p}" for p in found) or "none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
