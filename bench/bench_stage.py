"""One step of a built work folder, alone (numbers, not pass/fail): wall and CPU time and peak memory of a step of the
registry (assets/tables.py), run as the build runs it (its `hides` hidden), optionally under cProfile (CPU time). For finding
what a step spends, after `bench_build.py --keep DIR` left a release-scale build behind.

    python bench/bench_stage.py STEP --keep DIR [--scale release] [--upstream SLUG=PATH ...] [--copy]
                                [--cold] [--workers N] [--profile [N]] [--list]
    python bench/bench_stage.py STAGE SLUG ...      (the same as STEP STAGE_SLUG; `frames` is the items step)

STEP: any step of the registry: ingest_<slug>, labels_<slug>, candidates_<slug>, items_<slug>, split, steps,
release, ... (--list prints them). --keep DIR: a folder bench_build.py --keep wrote (its configs/ and work/); give
the --scale and --upstream it was built with. The step rewrites its own outputs in DIR/work (the release step: in
DIR/release), so the next steps of that folder then read them: pass --copy to run on a scratch copy instead. --cold:
the items step without its frame cache (deleted first). --workers N: frames.workers (1 = in-process, so the profiler
sees the decoding too).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from assets.tables import all_steps  # noqa: E402 - after sys.path names the repository
from pipeline.core.digests import hidden_view  # noqa: E402
from pipeline.settings.config import load_settings  # noqa: E402

LEGACY = {"frames": "items"}  # the stage names of the first version of this script


def _peak_rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", help="a step of the registry (--list), or a stage name followed by SLUG")
    ap.add_argument("slug", nargs="?")
    ap.add_argument("--keep", required=True, type=Path, help="a folder bench_build.py --keep wrote")
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--upstream", action="append", default=[], metavar="SLUG=PATH")
    ap.add_argument("--copy", action="store_true", help="run on a scratch copy of its work folder")
    ap.add_argument("--cold", action="store_true", help="items step: delete the frame cache first")
    ap.add_argument("--workers", type=int, help="frames.workers (1 = in-process)")
    ap.add_argument("--profile", type=int, nargs="?", const=40, help="cProfile, print the top N (cumulative)")
    ap.add_argument("--list", action="store_true", help="print the steps of the registry and stop")
    args = ap.parse_args()
    upstream = dict(u.split("=", 1) for u in args.upstream)
    config_dir = args.keep / "configs"
    cfg = load_settings(config_dir if config_dir.is_dir() else None, upstream=upstream, scale=args.scale)
    steps = {s.name: s for s in all_steps(cfg)}
    if args.list:
        print("\n".join(steps))
        return 0
    name = f"{LEGACY.get(args.step, args.step)}_{args.slug}" if args.slug else args.step
    if name not in steps:
        ap.error(f"no step {name!r}; steps: {', '.join(steps)}")
    step = steps[name]
    scratch = None
    work = args.keep / "work"
    if args.copy:
        scratch = Path(tempfile.mkdtemp(prefix="bench_stage_"))
        work = scratch / "work"
        shutil.copytree(args.keep / "work", work)
    cfg = cfg.with_values(
        {
            "build.work_dir": str(work),
            "build.release_dir": str((scratch or args.keep) / "release"),
            **({"frames.workers": args.workers} if args.workers is not None else {}),
        }
    )
    if args.cold:
        shutil.rmtree(work / cfg.frames.cache.dir, ignore_errors=True)
    view = hidden_view(cfg, step.hides)  # as the build runs it (assets/fingerprint.py run_step)
    # CPU time, not wall: a busy machine stretches every wait, the CPU a function burns stays what it is
    prof = cProfile.Profile(time.process_time) if args.profile else None
    t0 = time.time()
    c0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    try:
        if prof:
            prof.runcall(step.run, view)
        else:
            step.run(view)
        result = {
            "step": name,
            "wall_s": round(time.time() - t0, 2),
            # this process and its pools (children that ended): the step's whole CPU time
            "cpu_s": round(_cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - c0, 2),
            "peak_rss_mb": round(_peak_rss_mb(resource.RUSAGE_SELF)),
            "peak_rss_mb_largest_child": round(_peak_rss_mb(resource.RUSAGE_CHILDREN)),
            "profiled": bool(prof),
        }
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(result))
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
