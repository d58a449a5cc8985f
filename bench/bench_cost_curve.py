"""How the build's cost grows with the corpus (numbers, not pass/fail): cold builds over sample corpora with K times
the release scale's units per source (K = 0.25, 0.5, 1 by default), per step its wall time, CPU time and peak memory
against the units it reads, the growth fitted per step (cost = a * units^b: b = 1 is linear), and from the fits the
estimated cost of a build over each source's full public corpus, on this machine and on a Dask cluster of N workers.
The smallest corpus is also built on a local Dask cluster of 1 and 2 workers, to set the estimate beside a
measurement.

    python bench/bench_cost_curve.py --corpora DIR [--factors 0.25,0.5,1] [--dask-workers 1,2] [--keep DIR]
                                     [--resume DIR] [--out bench/results/cost_curve.json] [--markdown FILE]

--factors: K an integer >= 1 or a fraction in (0, 1]. The default span (4x) lies below the release scale because
writing a corpus is video encoding: on a 2-core machine K = 1 takes over an hour to write, K = 2 and 4 would take
hours more; the fit over a span below K = 1 extrapolates further to the full corpora (docs/running.md says so).
--corpora DIR holds the corpora as DIR/k<K>/<slug> (DIR/k0.25, DIR/k1, ...); a missing one is written first
(`processbench samples --scale release --units-factor K --out DIR/k<K>`: long, every unit's videos are encoded). The
quotas do not change with K, so the items and everything after them stay about the same size while ingest, labels and
candidates read every unit.
--resume DIR keeps each build's measurement as DIR/<build>.json (k0.25.json, dask1_k0.25.json, ...) and reuses one
found there instead of building again (a failed build is not kept): the builds can then be run while the larger
corpora are still being written, and a bench that stopped half-way goes on where it stopped.
Run it on a quiet machine: CPU time is exact whatever the load (bench_build.measure), wall time is not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import yaml

from upstream_adapters import ADAPTERS
from upstream_adapters.samples.common import units_factor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_build import REPO, become_subreaper, measure, step_costs

SLUGS = tuple(ADAPTERS)  # every source of the registry
# each source's full public corpus, in the units the build reads (the figures and their origin: bench/full_corpora.yaml)
FULL_UNITS = {s: int(n) for s, n in yaml.safe_load((Path(__file__).with_name("full_corpora.yaml")).read_text()).items()}
CLUSTER_WORKERS = (4, 16, 64)


def corpora(root: Path, k: int | float) -> dict[str, Path]:
    """The corpora with K times the release scale's units (DIR/k<K>), written first when missing."""
    folder = root / f"k{k:g}"
    if not all((folder / s).is_dir() for s in SLUGS):
        cmd = [str(Path(sys.executable).with_name("processbench")), "samples", "--scale", "release"]
        cmd += ["--units-factor", str(k), "--out", str(folder)]
        subprocess.run(cmd, check=True, cwd=REPO)
    return {s: folder / s for s in SLUGS}


def build(tmp: Path, roots: dict[str, Path], executor: str, workers: int | None = None) -> dict:
    """A cold build into tmp (fresh work folder, release and Dagster instance); its measure() and step costs."""
    shutil.rmtree(tmp, ignore_errors=True)
    home = tmp / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    cmd = [str(Path(sys.executable).with_name("processbench")), "build", "--scale", "release", "--executor", executor]
    cmd += ["--work-dir", str(tmp / "work"), "--release-dir", str(tmp / "release")]
    cmd += [a for s, p in roots.items() for a in ("--upstream", f"{s}={p}")]
    cmd += ["--max-concurrent", str(workers)] if workers else []
    out = measure(cmd, {**os.environ, "DAGSTER_HOME": str(home), "PYTHONHASHSEED": "0"})
    out["steps"] = step_costs(home, out["run_id"])
    out["units"] = {
        s: pl.read_parquet(tmp / "work" / "ir" / s / "units.parquet", columns=["unit_id"]).height for s in SLUGS
    }
    return out


def measured(resume: Path | None, name: str, run) -> dict:
    """run() (a build's measurement), or the one kept as resume/<name>.json by an earlier run of the bench."""
    kept = resume / f"{name}.json" if resume else None
    if kept and kept.is_file():
        print(f"{name}: reusing the measurement in {kept}", flush=True)
        return json.loads(kept.read_text())
    out = run()
    if kept and out.get("rc") == 0:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


def source_of(step: str) -> str | None:
    return next((s for s in SLUGS if step.endswith(f"_{s}")), None)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a * x^b, least squares on the logarithms (b = 1: linear growth)."""
    pts = [(math.log(x), math.log(max(y, 1e-3))) for x, y in zip(xs, ys)]
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    b = sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else 0.0
    return math.exp(my - b * mx), b


def growth(b: float) -> str:
    return "flat" if b < 0.3 else "sublinear" if b < 0.85 else "linear" if b <= 1.15 else f"superlinear (n^{b:.2f})"


def curve(runs: dict[int, dict]) -> dict:
    """Per step: units, CPU-s, wall and peak memory per K, the fitted growth, the estimate at the full corpus."""
    ks = sorted(runs)
    steps = [s for s in runs[ks[0]]["steps"] if all(s in runs[k]["steps"] for k in ks)]
    full_total = sum(FULL_UNITS.values())
    out = {}
    for step in steps:
        src = source_of(step)
        units = [runs[k]["units"][src] if src else sum(runs[k]["units"].values()) for k in ks]
        full = FULL_UNITS[src] if src else full_total
        row = {"units": units, "full_units": full}
        for what in ("cpu_s", "wall_s", "peak_rss_mb"):
            ys = [float(runs[k]["steps"][step][what] or 0.0) for k in ks]
            a, b = fit(units, ys)
            row[what] = ys
            row[f"{what}_exponent"] = round(b, 2)
            row[f"{what}_full"] = round(a * full**b, 1)
        row["growth"] = growth(row["cpu_s_exponent"])
        out[step] = row
    return out


def estimates(rows: dict, cores: int, dask: dict[int, dict], runs: dict[int, dict]) -> dict:
    """Wall time of a full-corpus build: the larger of (all CPU-s / workers) and its critical path (the longest
    source's chain of steps, then the shared steps), each step's CPU time taken as its wall time on one core;
    calibrated by the Dask runs at the smallest K (measured wall / the same model's estimate)."""

    def model(cpu: dict[str, float], n: int) -> float:
        chains = {s: sum(v for k, v in cpu.items() if source_of(k) == s) for s in SLUGS}
        shared = sum(v for k, v in cpu.items() if source_of(k) is None)
        return max(sum(cpu.values()) / n, max(chains.values()) + shared)

    full = {k: r["cpu_s_full"] for k, r in rows.items()}
    small = min(runs)
    small_cpu = {k: float(v["cpu_s"] or 0.0) for k, v in runs[small]["steps"].items()}
    overhead = {n: round(d["wall_s"] / model(small_cpu, n), 2) for n, d in dask.items() if d.get("rc") == 0}
    factor = max(overhead.values(), default=1.0)
    return {
        "full_units": FULL_UNITS,
        "cpu_s": round(sum(full.values())),
        "cpu_hours": round(sum(full.values()) / 3600, 1),
        "this_machine": {"cores": cores, "wall_h": round(model(full, cores) / 3600, 2)},
        "dask_measured": {
            n: {"wall_s": d["wall_s"], "cpu_s": d["cpu_s"], "model_wall_s": round(model(small_cpu, n), 1)}
            for n, d in dask.items()
        },
        "dask_overhead": overhead,
        "dask_cluster_wall_h": {n: round(model(full, n) * factor / 3600, 2) for n in CLUSTER_WORKERS},
        "peak_step_memory_mb_full": max((r["peak_rss_mb_full"] for r in rows.values()), default=0),
    }


def markdown(runs: dict[int, dict], rows: dict, est: dict) -> str:
    ks = sorted(runs)
    head = "| step | units (K = " + ", ".join(map(str, ks)) + ") | CPU-s | wall s | peak MB | growth (CPU) |"
    lines = [head, "|---|---|---|---|---|---|"]
    for step, r in rows.items():
        cells = [
            " / ".join(map(str, r["units"])),
            " / ".join(f"{v:.1f}" for v in r["cpu_s"]),
            " / ".join(f"{v:.1f}" for v in r["wall_s"]),
            " / ".join(f"{v:.0f}" for v in r["peak_rss_mb"]),
            f"{r['growth']} (b = {r['cpu_s_exponent']})",
        ]
        lines.append(f"| `{step}` | " + " | ".join(cells) + " |")
    lines.append(
        "| **build** | "
        + " / ".join(str(sum(runs[k]["units"].values())) for k in ks)
        + " | "
        + " / ".join(f"{runs[k]['cpu_s']:.0f}" for k in ks)
        + " | "
        + " / ".join(f"{runs[k]['wall_s']:.0f}" for k in ks)
        + " | "
        + " / ".join(str(runs[k]["peak_pss_tree_mb"]) for k in ks)
        + " (tree PSS) | |"
    )
    lines += [
        "",
        f"Full public corpora ({', '.join(f'{s} {n:,}' for s, n in est['full_units'].items())} units): "
        f"{est['cpu_s']:,} CPU-s ({est['cpu_hours']} CPU-hours); on this machine ({est['this_machine']['cores']} "
        f"cores) about {est['this_machine']['wall_h']} h; on a Dask cluster of "
        + ", ".join(f"{n} workers {h} h" for n, h in est["dask_cluster_wall_h"].items())
        + f"; largest step's memory about {est['peak_step_memory_mb_full']:,} MB.",
    ]
    if est["dask_measured"]:
        lines.append(
            "Dask, local cluster, K = "
            + str(min(runs))
            + ": "
            + "; ".join(
                f"{n} worker(s) {d['wall_s']} s wall ({d['cpu_s']} CPU-s; model {d['model_wall_s']} s)"
                for n, d in est["dask_measured"].items()
            )
            + "."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", required=True, type=Path, help="DIR/k<K>/<slug> (written when missing)")
    ap.add_argument("--factors", default="0.25,0.5,1", help="units factors K (integers >= 1, fractions in (0, 1])")
    ap.add_argument("--dask-workers", default="1,2", help="local Dask workers to build the smallest K with ('' none)")
    ap.add_argument("--keep", type=Path, help="build under this folder (kept) instead of a temporary one")
    ap.add_argument("--resume", type=Path, help="keep each build's measurement here and reuse those found")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "cost_curve.json"))
    ap.add_argument("--markdown", help="also write the table (markdown) to this file")
    args = ap.parse_args(argv)
    become_subreaper()
    try:
        factors = sorted({units_factor(k) for k in args.factors.split(",")})
    except ValueError as exc:
        ap.error(f"--factors: {exc}")
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench_cost_"))
    runs = {}
    for k in factors:
        runs[k] = measured(
            args.resume, f"k{k:g}", lambda: build(tmp / f"k{k:g}", corpora(args.corpora, k), "multiprocess")
        )
        print(f"K={k}: {runs[k]['wall_s']} s, {runs[k]['cpu_s']} CPU-s, units {runs[k]['units']}", flush=True)
    dask = {}
    for n in [int(x) for x in args.dask_workers.split(",") if x]:
        small = corpora(args.corpora, factors[0])
        dask[n] = measured(
            args.resume, f"dask{n}_k{factors[0]:g}", lambda: build(tmp / f"dask{n}", small, "dask", workers=n)
        )
        print(f"dask {n} worker(s), K={factors[0]}: {dask[n]['wall_s']} s, {dask[n]['cpu_s']} CPU-s", flush=True)
    rows = curve(runs)
    est = estimates(rows, os.cpu_count() or 1, dask, runs)
    result = {"runs": runs, "dask": dask, "steps": rows, "estimate": est}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    table = markdown(runs, rows, est)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    print(table)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
