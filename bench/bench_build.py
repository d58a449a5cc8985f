"""Build benchmark (numbers, not pass/fail): a cold `processbench build`, a rebuild with nothing changed, and a rebuild
after editing one task template, each timed with the cores it kept busy and the peak memory of its process tree.

    python bench/bench_build.py [--scale demo|release] [--upstream SLUG=PATH ...] [--executor multiprocess]
                                [--out bench/results/build.json] [--keep DIR]

Without --upstream it builds the demo from the default sample corpora (generated when missing). The machine's load
average is recorded next to each timing, since other work on the machine slows a build down.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent


def measure(cmd: list[str], env: dict) -> dict:
    """Run cmd; sample its whole process tree every 0.2 s: the sum of RSS (shared pages counted in every process that
    maps them, so an upper bound) and of PSS (shared pages split between the processes: what the tree really holds),
    and the largest single RSS. Cores busy = CPU time of every process of the tree (each counted once, as last
    sampled) / wall: own times only (a parent's "children" times would count its reaped children twice), so a process's
    last 0.2 s before it exits is missed."""
    load = os.getloadavg()[0]
    cpu: dict[int, float] = {}  # pid -> its own user + system time at its last sample
    t0 = time.time()
    proc = psutil.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak_tree = peak_one = peak_pss = 0
    peak_at, peak_held = 0.0, []
    tick = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        full = tick % 5 == 0  # PSS reads /proc/<pid>/smaps_rollup: once a second, so the sampling stays cheap
        total = pss = 0
        held = []  # (PSS MiB, what the process runs) at this sample
        for p in tree:
            try:
                mem = p.memory_full_info() if full else p.memory_info()
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
                what = _what(p) if full else ""
            except psutil.Error:
                continue
            total += mem.rss
            pss += getattr(mem, "pss", mem.rss)
            peak_one = max(peak_one, mem.rss)
            held.append((round(getattr(mem, "pss", mem.rss) / 2**20), what))
        peak_tree = max(peak_tree, total)
        if full and pss > peak_pss:  # where the tree's memory is at its peak: which processes hold it
            peak_pss, peak_at, peak_held = pss, time.time() - t0, sorted(held, reverse=True)[:8]
        tick += 1
        time.sleep(0.2)
    out = proc.stdout.read()
    proc.wait()
    wall = time.time() - t0
    steps = re.search(r"\((\d+) step\(s\) run", out)
    return {
        "cmd": " ".join(cmd[1:]),
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "cores_busy": round(sum(cpu.values()) / max(wall, 1e-9), 2),
        "peak_rss_tree_mb": round(peak_tree / 2**20),
        "peak_pss_tree_mb": round(peak_pss / 2**20),
        "peak_rss_process_mb": round(peak_one / 2**20),
        "peak_pss_at_s": round(peak_at, 1),
        "peak_pss_largest_processes_mb": peak_held,
        "steps_run": int(steps.group(1)) if steps else 0,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "tail": out.strip().splitlines()[-3:],
    }


def _what(p: psutil.Process) -> str:
    """pid and the tail of the command line (step processes are forks of one server and share its command line:
    match the time of the peak with the run's step timeline to name them)."""
    return f"{p.pid} {' '.join(p.cmdline()[-2:])[-50:]}"


def edit_one_template(config_dir: Path) -> str:
    """Change one task template's question text (T5): only that configuration's dependants should recompute.
    The edit goes through the parsed YAML, so a reworded question can never turn it into a silent no-op."""
    path = config_dir / "tasks" / "T5.yaml"
    tpl = yaml.safe_load(path.read_text())
    before = tpl["question"]["default"]
    tpl["question"]["default"] = before.rstrip() + " Answer for the NOW frame."
    path.write_text(yaml.safe_dump(tpl, sort_keys=False, allow_unicode=True))
    if yaml.safe_load(path.read_text())["question"]["default"] == before:
        raise SystemExit(f"{path}: the template edit changed nothing")
    return path.name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--upstream", action="append", default=[])
    ap.add_argument("--executor", default="multiprocess")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "build.json"))
    ap.add_argument("--keep", help="build into this folder (kept) instead of a temporary one")
    args = ap.parse_args(argv)
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench_build_"))
    shutil.rmtree(tmp / "work", ignore_errors=True)
    config_dir = tmp / "configs"
    shutil.rmtree(config_dir, ignore_errors=True)
    shutil.copytree(REPO / "configs", config_dir)
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home"), "PYTHONHASHSEED": "0"}
    (tmp / "dagster_home").mkdir(parents=True, exist_ok=True)
    (tmp / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    cmd = [
        str(Path(sys.executable).with_name("processbench")),
        "build",
        "--scale",
        args.scale,
        "--executor",
        args.executor,
        "--config-dir",
        str(config_dir),
        "--work-dir",
        str(tmp / "work"),
        "--release-dir",
        str(tmp / "release"),
    ]
    cmd += [a for u in args.upstream for a in ("--upstream", u)] or ["--samples"]
    results = {"cold": measure(cmd, env)}
    results["rebuild_unchanged"] = measure(cmd, env)
    results["edited_template"] = edit_one_template(config_dir)
    results["rebuild_one_template"] = measure(cmd, env)
    results["cpu_count"] = os.cpu_count()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for k, r in results.items() if isinstance(r, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
