"""One stage of a built work folder, alone (numbers, not pass/fail): wall and CPU time and peak memory of
`pipeline.stages.run_<stage>`, optionally under cProfile. For finding what a step spends, after `bench_build.py
--keep DIR` left a release-scale build behind.

    python bench/bench_stage.py STAGE [SLUG] --keep DIR [--scale release] [--upstream SLUG=PATH ...] [--copy]
                                [--cold] [--workers N] [--profile [N]]

STAGE: ingest | labels | candidates | frames (the items step) | split | release; SLUG for the per-source stages.
--keep DIR: a folder bench_build.py --keep wrote (its configs/ and work/); give the --scale and --upstream it was
built with. The stage rewrites its own outputs in DIR/work, so the next stages of that
folder then read them: pass --copy to run on a scratch copy instead. --cold: the items step without its frame
cache (deleted first). --workers N: frames.workers (1 = in-process, so the profiler sees the decoding too).
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

from pipeline import stages  # noqa: E402 - after sys.path names the repository
from pipeline.settings.config import load_settings  # noqa: E402 - after sys.path names the repository

PER_SOURCE = {"ingest", "labels", "candidates", "frames"}
STAGES = PER_SOURCE | {"split", "release"}


def _peak_rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=sorted(STAGES))
    ap.add_argument("slug", nargs="?")
    ap.add_argument("--keep", required=True, type=Path, help="a folder bench_build.py --keep wrote")
    ap.add_argument("--scale", default="demo")
    ap.add_argument("--upstream", action="append", default=[], metavar="SLUG=PATH")
    ap.add_argument("--copy", action="store_true", help="run on a scratch copy of its work folder")
    ap.add_argument("--cold", action="store_true", help="items step: delete the frame cache first")
    ap.add_argument("--workers", type=int, help="frames.workers (1 = in-process)")
    ap.add_argument("--profile", type=int, nargs="?", const=40, help="cProfile, print the top N (cumulative)")
    args = ap.parse_args()
    if (args.stage in PER_SOURCE) != bool(args.slug):
        ap.error(f"{args.stage}: {'give' if args.stage in PER_SOURCE else 'no'} source slug")
    upstream = dict(u.split("=", 1) for u in args.upstream)
    cfg = load_settings(args.keep / "configs", upstream=upstream, scale=args.scale)
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
    run = getattr(stages, f"run_{args.stage}")
    call = (lambda: run(cfg, args.slug)) if args.slug else (lambda: run(cfg))
    prof = cProfile.Profile() if args.profile else None
    t0, c0 = time.time(), time.process_time()
    try:
        if prof:
            prof.runcall(call)
        else:
            call()
        result = {
            "stage": args.stage,
            "slug": args.slug,
            "wall_s": round(time.time() - t0, 2),
            "cpu_s_this_process": round(time.process_time() - c0, 2),
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
