"""Benchmark `processbench eval`'s own overhead per item: every eval item of a release (both tracks: multiple choice and
the T13 step items) asked of a local
OpenAI-compatible server that answers at once (tests/eval_server.py, in its own process, so its JSON parsing does not
share our interpreter), at concurrency 1 and 64. Image reading, hash check and PNG/base64 encoding are included, as are
the request, the response parsing and the store's append + fsync. Per item it reports the wall time (what a run
against an instant server costs) and the runner process's CPU time (its own overhead, whatever the server does; the
server's parsing runs in the other process). Numbers, not pass/fail.

    .venv/bin/python bench/bench_eval.py                          # the repo's release/ (make rebuild), sample corpora
    .venv/bin/python bench/bench_eval.py --release DIR (--images DIR | --upstream SLUG=PATH ...)
                                         [--concurrency 1,64] [--repeat 3]

Without --images the images are rebuilt first from the configured sample corpora (processbench reconstruct's code);
without a release, `processbench build --samples` makes the demo one (what `make rebuild` does). Prints a table and
writes bench/results/eval.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
RESULTS = REPO / "bench" / "results" / "eval.json"

from pipeline.settings.config import load_settings  # noqa: E402 - after the sys.path lines above (bench scripts run from a checkout)


def _serve(release: str, conn) -> None:
    from eval_server import FakeOpenAI

    with FakeOpenAI(Path(release), "bench-model", check_pixels=False) as server:
        conn.send(server.base_url)
        conn.recv()  # until the parent says stop


def _release_and_images(args, cfg, tmp: Path) -> tuple[Path, Path]:
    release = Path(args.release or REPO / cfg.build.release_dir)
    if not (release / cfg.release.files.eval_parquet).is_file():
        from assets.cli import main as cli

        print(f"no release at {release}: building the demo one (processbench build --samples)", flush=True)
        cli(["build", "--samples", "--release-dir", str(release)])
        if not (release / cfg.release.files.eval_parquet).is_file():
            raise SystemExit("the demo build wrote no release")
    from pipeline.reconstruct import images_folder, reconstruct

    if args.images:  # `reconstruct --out`'s folder or its images/ folder
        return release, images_folder(Path(args.images), cfg)
    from pipeline.evaluate.items import load_items

    items = load_items(release, cfg)
    given = dict(pair.split("=", 1) for pair in args.upstream or [])
    roots = {s: Path(given.get(s) or cfg.sources[s].root) for s in sorted({it.source for it in items})}
    t = time.perf_counter()
    report = reconstruct(
        release, roots, cfg, tmp / "images", sources=sorted(roots), item_ids={it.item_id for it in items}
    )
    bad = sum(r["missing"] + r["differs"] for r in report["sources"].values())
    if bad:
        raise SystemExit(
            f"{bad} items' images could not be rebuilt from {roots} (pass --upstream SLUG=PATH for the "
            f"corpora the release was built from, or --images)"
        )
    print(f"images of {len(items)} items rebuilt in {time.perf_counter() - t:.1f}s", flush=True)
    return release, images_folder(tmp / "images", cfg)


def image_cost(release: Path, images: Path, cfg) -> dict:
    """Reading, hash-checking and encoding every item's images, alone, on one thread."""
    from pipeline.evaluate.images import load_item_images
    from pipeline.evaluate.items import load_items

    items = load_items(release, cfg)
    t = time.perf_counter()
    n_img = nbytes = 0
    for it in items:
        urls = load_item_images(it, images)
        n_img += len(urls)
        nbytes += sum(len(u) for u in urls)
    wall = time.perf_counter() - t
    return {
        "items": len(items),
        "images": n_img,
        "ms_per_item": round(1000 * wall / len(items), 3),
        "request_kb_per_item": round(nbytes / 1024 / len(items), 1),
    }


def one_run(release: Path, images: Path, base_url: str, concurrency: int, out: Path, cfg) -> dict:
    from pipeline.evaluate.options import ClientOptions
    from pipeline.evaluate.run import EvalOptions, run_eval

    opts = EvalOptions(
        release=release,
        out=out,
        images=images,
        progress=False,
        score=False,
        client=ClientOptions(base_url=base_url, model="bench-model", concurrency=concurrency, retries=0, timeout_s=60),
    )
    t, cpu = time.perf_counter(), time.process_time()
    s = run_eval(opts, cfg)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    if not s["complete"]:
        raise SystemExit(f"bench run incomplete: {s['stopped'] or s['failures'][:3]}")
    return {
        "items": s["items"],
        "wall_s": round(wall, 3),
        "ms_per_item": round(1000 * wall / s["items"], 3),
        "cpu_ms_per_item": round(1000 * cpu / s["items"], 3),
        "items_per_s": round(s["items"] / wall, 1),
        "request_latency_s": s["latency_s"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--release")
    p.add_argument("--images")
    p.add_argument("--upstream", action="append", metavar="SLUG=PATH", help="the corpora the release was built from")
    p.add_argument("--concurrency", default="1,64")
    p.add_argument("--repeat", type=int, default=3, help="runs per concurrency (the fastest is reported)")
    args = p.parse_args()
    os.environ.pop("OPENAI_API_KEY", None)
    cfg = load_settings()
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmpd:
        tmp = Path(tmpd)
        release, images = _release_and_images(args, cfg, tmp)
        results = {
            "machine": {
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "load_avg_start": list(os.getloadavg()),
            },
            "images_alone": image_cost(release, images, cfg),
            "runs": {},
        }
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        server = ctx.Process(target=_serve, args=(str(release), child), daemon=True)
        server.start()
        try:
            base_url = parent.recv()
            for c in [int(x) for x in args.concurrency.split(",")]:
                runs = [one_run(release, images, base_url, c, tmp / f"run_c{c}_{k}", cfg) for k in range(args.repeat)]
                results["runs"][str(c)] = min(runs, key=lambda r: r["wall_s"]) | {
                    "all_ms_per_item": [r["ms_per_item"] for r in runs],
                    "all_cpu_ms_per_item": [r["cpu_ms_per_item"] for r in runs],
                }
        finally:
            parent.send("stop")
            server.join(timeout=30)
            if server.is_alive():
                server.terminate()
        results["machine"]["load_avg_end"] = list(os.getloadavg())
    img = results["images_alone"]
    print(
        f"{img['items']} items, {img['images']} images, {img['request_kb_per_item']} KB of request per item; "
        f"images alone (read, hash check, encode): {img['ms_per_item']} ms/item"
    )
    print(
        "| concurrency | items | wall s | wall ms/item | runner CPU ms/item | items/s | request p50 s | "
        "runs: wall ms/item |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c, r in results["runs"].items():
        print(
            f"| {c} | {r['items']} | {r['wall_s']} | {r['ms_per_item']} | {r['cpu_ms_per_item']} | "
            f"{r['items_per_s']} | {r['request_latency_s']['p50']} | {r['all_ms_per_item']} |"
        )
    print(
        f"load average {results['machine']['load_avg_start'][0]:.1f} -> {results['machine']['load_avg_end'][0]:.1f} "
        f"on {results['machine']['cores']} cores"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"written: {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
