"""The frames stage on a built work folder (warm frame cache): what the cache's checks cost on a rebuild.

    .venv/bin/python bench/bench_warm_frames.py [REPS] [--header-only]

Runs pipeline.stages.run_frames for every configured source REPS times (default 3) in one process and prints each
pass's time with (items, frames decoded, cache hits) per source. The first pass decodes whatever the cache lacks; the
later ones are the warm rebuild. --header-only sets frames.cache.check_pixels_on_lookup to false for the run.
Build the work folder first (`processbench build --samples --scale demo`).
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> None:
    from pipeline import stages
    from pipeline.settings.config import load_settings

    cfg = load_settings()
    if "--header-only" in argv:
        cfg = cfg.with_values({"frames.cache.check_pixels_on_lookup": False})
    reps = int(next((a for a in argv if a.isdigit()), 3))
    for _ in range(reps):
        t = time.time()
        out = {}
        for slug in stages.sources(cfg):
            r = stages.run_frames(cfg, slug)
            out[slug] = (r["items"], r["frames_decoded"], r["frames_cached"])
        print(f"frames stage, all sources: {time.time() - t:.2f} s {out}", flush=True)


if __name__ == "__main__":  # the extraction pool's fork server re-imports __main__
    main(sys.argv[1:])
