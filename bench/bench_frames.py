"""Frame-extraction benchmark (a script, not a test): `make bench` runs `.venv/bin/python bench/bench_frames.py`.

Generates its own sample videos (frame index barcoded into every frame), then measures:

1. extraction wall time of `pipeline.frames.extract.extract_frames` (one worker, fresh cache: decode + PNG write +
   stats) on an item-like selection (5-frame windows around anchors) of a 60 s long-GOP H.264 clip, against
   (a) a decode-only pass over the whole clip: `ffmpeg -v error -i X -f null -` (Debian's ffmpeg; installed with
       apt-get when missing; falls back to a sequential PyAV decode when it cannot be installed)
   (b) naive per-frame seeking with OpenCV (CAP_PROP_POS_FRAMES + read per frame)
   targets: extraction <= 1.5x decode-only; >= 3x faster than naive seeking on long-GOP H.264;
2. the same for other codecs (HEVC open GOP, AV1, mpeg4) and selection densities, plus decord vs PyAV inside
   `read_frames` (why `auto` prefers PyAV);
3. peak memory (parent VmHWM + tracemalloc peak, worker VmHWM) for 4 / 16 / 64 videos, each run in a
   fresh process: target, independent of the number of videos;
4. parallel speedup of the worker pool (1 worker vs one per core) on 32 videos.

Every decoded frame is checked against its barcode. Prints a table and writes bench/results/frames.json
(gitignored). Usage: bench_frames.py [--quick] [--no-install]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RESULTS = REPO / "bench" / "results" / "frames.json"
FPS = 30
SIZE = (320, 240)
WINDOW = (-6, -3, 0, 3, 6)  # like T6 / T5 context windows


# ------------------------------------------------------------------------------------------------ helpers
def item_selection(n_frames: int, every_sec: float = 5.0) -> list[int]:
    """Item-like frame requests: a 5-frame window around an anchor every `every_sec` seconds."""
    out = set()
    step = int(every_sec * FPS)
    for a in range(step // 2, n_frames - 6, step):
        out.update(a + o for o in WINDOW if 0 <= a + o < n_frames)
    return sorted(out)


def item_order(indices: list[int], seed: int = 0) -> list[int]:
    """The same frames in the order a per-item loop asks for them: windows (items) shuffled, each window in order."""
    import random

    windows: dict[int, list[int]] = {}
    for i in indices:  # consecutive requests closer than the window span belong to one item
        key = next((a for a in windows if abs(i - windows[a][0]) <= WINDOW[-1] - WINDOW[0]), i)
        windows.setdefault(key, []).append(i)
    order = sorted(windows)
    random.Random(seed).shuffle(order)
    return [i for a in order for i in windows[a]]


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def make_video(path: Path, n: int, codec: str, gop: int) -> Path:
    """Barcoded frames encoded with PyAV. H.264 is encoded here (not with samples.common.encode_video) to switch
    x264's scene-cut detection off: the synthetic background jumps would otherwise insert a keyframe every ~100
    frames, and a continuous robot video keeps the full GOP, which is the case this benchmark is about."""
    from fractions import Fraction

    import av
    import numpy as np

    from upstream_adapters.samples.common import encode_video, render_frame

    if path.exists():
        return path
    frames = (render_frame(i, SIZE[0], SIZE[1], ((i % 300) / 300, 0.5), hue=i // 300) for i in range(n))
    if codec != "h264":
        encode_video(frames, FPS, codec=codec, gop=gop, bframes=True, path=path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=Fraction(FPS))
        stream.pix_fmt = "yuv420p"
        stream.width, stream.height = SIZE
        stream.gop_size = gop
        stream.codec_context.options = {
            "preset": "veryfast",
            "crf": "20",
            "bf": "2",
            "threads": "1",
            "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0",
        }
        for rgb in frames:
            for pkt in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")):
                out.mux(pkt)
        for pkt in stream.encode():
            out.mux(pkt)
    return path


def ensure_ffmpeg(allow_install: bool) -> tuple[str | None, str]:
    exe = shutil.which("ffmpeg")
    if exe:
        return exe, "ffmpeg CLI (found)"
    if not allow_install:
        return None, "ffmpeg CLI not installed (--no-install)"
    if shutil.which("apt-get") is None:
        return None, "ffmpeg CLI missing and no apt-get"
    prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
    if prefix is None:
        return None, "ffmpeg CLI missing; not root and no sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("installing Debian's ffmpeg with apt-get (decode-only baseline) ...", flush=True)
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "ffmpeg"]):
        try:
            r = subprocess.run(prefix + cmd, env=env, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"apt-get failed: {exc}"
        if r.returncode != 0 and cmd[1] == "install":
            return None, f"apt-get install ffmpeg failed: {r.stderr.strip()[-200:]}"
    exe = shutil.which("ffmpeg")
    return (exe, "ffmpeg CLI (installed with apt-get)") if exe else (None, "ffmpeg still missing after apt-get")


def decode_only(path: Path, ffmpeg: str | None, threads: int | None = None) -> None:
    if ffmpeg:
        cmd = (
            [ffmpeg, "-v", "error"]
            + (["-threads", str(threads)] if threads else [])
            + ["-i", str(path), "-f", "null", "-"]
        )
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return
    import av

    with av.open(str(path)) as c:  # fallback: plain sequential PyAV decode, no pixel conversion
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        for _ in c.decode(s):
            pass


def naive_cv2_seek(path: Path, indices: list[int]) -> dict:
    import cv2

    cap = cv2.VideoCapture(str(path))
    out = {}
    for i in indices:
        cap.set(cv2.CAP_PROP_POS_FRAMES, i)
        ok, bgr = cap.read()
        if ok:
            out[i] = bgr[..., ::-1]
    cap.release()
    return out


def wrong_frames(frames: dict) -> int:
    from upstream_adapters.samples.common import decode_frame_index

    return sum(decode_frame_index(img) != i for i, img in frames.items())


def extract_once(root: Path, units: list[str], indices: list[int], workers: int, cache_dir: Path) -> dict:
    import polars as pl

    from pipeline.frames.cache import FrameCache
    from pipeline.frames.extract import DirectoryReaders, extract_frames

    shutil.rmtree(cache_dir, ignore_errors=True)
    req = pl.DataFrame(
        {
            "source": "b",
            "unit_id": [u for u in units for _ in indices],
            "camera": "cam",
            "frame_index": [i for _ in units for i in indices],
        }
    )
    cache = FrameCache(cache_dir)
    t = time.perf_counter()
    table = extract_frames(req, DirectoryReaders(root, "{unit_id}/{camera}.mp4"), cache, workers=workers)
    wall = time.perf_counter() - t
    ok = table.filter(pl.col("status") == "ok")
    return {"wall": wall, "frames": table.height, "ok": ok.height, "cache": cache, "table": ok}


def check_cache(res: dict, sample: int = 40) -> int:
    from upstream_adapters.samples.common import decode_frame_index

    rows = res["table"].head(sample).iter_rows(named=True)
    return sum(decode_frame_index(res["cache"].get(r["cache_key"])) != r["frame_index"] for r in rows)


def link_units(root: Path, src: Path, n: int) -> list[str]:
    units = []
    for k in range(n):
        unit = f"unit_{k:03d}"
        dst = root / unit / "cam.mp4"
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        units.append(unit)
    return units


# ------------------------------------------------------------------------------------------------ memory probe
def memory_probe(root: str, n_units: int, workers: int) -> None:
    """Run in a fresh process: extract the item selection from n_units videos, print peak memory as JSON."""
    import tracemalloc

    import polars  # noqa: F401 - imports first: tracemalloc then measures the extraction, not module loading

    from pipeline.frames import extract  # noqa: F401 - loaded before tracemalloc starts, as polars is
    from pipeline.frames.worker import peak_rss_mb
    from upstream_adapters.media import video

    root_p = Path(root)
    units = [f"unit_{k:03d}" for k in range(n_units)]
    n = video.count_frames(root_p / units[0] / "cam.mp4")
    tracemalloc.start()
    with tempfile.TemporaryDirectory() as tmp:
        res = extract_once(root_p, units, item_selection(n), workers, Path(tmp) / "cache")
    _, peak = tracemalloc.get_traced_memory()
    print(
        json.dumps(
            {
                "videos": n_units,
                "frames": res["ok"],
                "wall_s": res["wall"],
                "parent_maxrss_mb": peak_rss_mb(),
                "workers_maxrss_mb": res["cache"].counters["worker_peak_rss_mb"],
                "parent_tracemalloc_peak_mb": peak / 2**20,
            }
        )
    )


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and videos")
    ap.add_argument("--no-install", action="store_true", help="never apt-get install ffmpeg")
    ap.add_argument("--memory-probe", nargs=3, metavar=("ROOT", "N", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe[0], int(args.memory_probe[1]), int(args.memory_probe[2]))
        return 0

    import av
    import cv2

    from pipeline.core.pool import resolve_workers
    from upstream_adapters.media import video

    repeat = 2 if args.quick else 3
    cores = resolve_workers(0)
    ffmpeg, ffmpeg_note = ensure_ffmpeg(not args.no_install)
    work = Path(tempfile.mkdtemp(prefix="pb_bench_frames_"))
    results: dict = {
        "machine": {
            "cores": cores,
            "python": platform.python_version(),
            "av": av.__version__,
            "opencv": cv2.__version__,
            "load_avg_start": list(os.getloadavg()),
        },
        "decode_only_baseline": ffmpeg_note,
        "size": list(SIZE),
        "fps": FPS,
    }
    try:
        vids = work / "videos"
        print(f"generating sample videos in {vids} ...", flush=True)
        long_h264 = make_video(vids / "h264_60s_g250.mp4", 60 * FPS, "h264", 250)
        clips = {
            "h264 60s g250 (B-frames)": long_h264,
            "hevc 20s g250 (open GOP)": make_video(vids / "hevc_20s.mp4", 20 * FPS, "hevc", 250),
            "av1 20s g250": make_video(vids / "av1_20s.mp4", 20 * FPS, "av1", 250),
            "mpeg4 20s g12": make_video(vids / "mpeg4_20s.mp4", 20 * FPS, "mpeg4", 12),
        }

        # 1 + 2: per-video comparison ------------------------------------------------------------------
        rows = []
        for name, path in clips.items():
            n = video.count_frames(path)
            unit_root = work / "single" / path.stem
            units = link_units(unit_root, path, 1)
            sels = {"items": item_selection(n), "sparse4": [n // 5, 2 * n // 5, 3 * n // 5, 4 * n // 5]}
            if path == long_h264:
                sels["dense1of3"] = list(range(0, n, 3))
            t_dec = best_of(lambda: decode_only(path, ffmpeg), repeat)
            t_dec1 = best_of(lambda: decode_only(path, ffmpeg, threads=1), repeat) if ffmpeg else None
            for sel_name, idx in sels.items():
                ex = [extract_once(unit_root, units, idx, 1, work / "cache1") for _ in range(repeat)]
                t_ex = min(e["wall"] for e in ex)
                wrong = check_cache(ex[0], sample=len(idx))
                naive = None
                if sel_name == "items" or path == long_h264:
                    naive = {}
                    for order_name, order in (("sorted", idx), ("item_order", item_order(idx))):
                        got = {}

                        def run_naive(order=order, got=got):
                            got.clear()
                            got.update(naive_cv2_seek(path, order))

                        t_naive = best_of(run_naive, repeat)
                        naive[order_name] = {
                            "s": t_naive,
                            "wrong": wrong_frames(got),
                            "missing": len(idx) - len(got),
                            "speedup": t_naive / t_ex,
                        }
                dec_cmp = {}
                for dec in ("pyav", "decord"):
                    try:
                        t = best_of(lambda: video.read_frames(path, idx, decoder=dec), repeat)
                        dec_cmp[dec] = t
                    except video.DecodeError as exc:
                        dec_cmp[dec] = f"n/a ({str(exc)[:40]})"
                rows.append(
                    {
                        "video": name,
                        "frames_in_video": n,
                        "selection": sel_name,
                        "requested": len(idx),
                        "extract_s": t_ex,
                        "extract_fps": len(idx) / t_ex,
                        "extract_wrong": wrong,
                        "decode_only_s": t_dec,
                        "decode_only_1thread_s": t_dec1,
                        "ratio_extract_vs_decode_only": t_ex / t_dec,
                        "naive_cv2_seek": naive,
                        "read_frames_s": dec_cmp,
                    }
                )
                print(
                    f"  {name:28s} {sel_name:9s} {len(idx):4d} frames: extract {t_ex:6.3f}s "
                    f"decode-only {t_dec:6.3f}s"
                    + (
                        f" naive-seek {naive['sorted']['s']:6.3f}s (sorted) "
                        f"{naive['item_order']['s']:6.3f}s (item order)"
                        if naive
                        else ""
                    ),
                    flush=True,
                )
        results["per_video"] = rows

        # 3: memory vs number of videos (fresh process each) --------------------------------------------
        short = make_video(vids / "h264_10s.mp4", 10 * FPS, "h264", 250)
        counts = [4, 16] if args.quick else [4, 16, 64]
        many_root = work / "many"
        link_units(many_root, short, max(counts + [32]))
        mem = []
        for m in counts:
            out = subprocess.run(
                [sys.executable, __file__, "--memory-probe", str(many_root), str(m), str(cores)],
                capture_output=True,
                text=True,
                check=True,
            )
            mem.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(
                f"  memory: {m:3d} videos -> parent maxrss {mem[-1]['parent_maxrss_mb']:.0f} MB, "
                f"tracemalloc peak {mem[-1]['parent_tracemalloc_peak_mb']:.1f} MB, "
                f"workers maxrss {mem[-1]['workers_maxrss_mb']:.0f} MB",
                flush=True,
            )
        results["memory"] = mem

        # 4: parallel speedup ----------------------------------------------------------------------------
        units = [f"unit_{k:03d}" for k in range(32)]
        idx = item_selection(video.count_frames(short))
        par = {}
        for w in sorted({1, cores}):
            runs = [extract_once(many_root, units, idx, w, work / f"cache_par{w}") for _ in range(repeat)]
            par[w] = min(r["wall"] for r in runs)
            print(f"  pool: {w} worker(s), 32 videos x {len(idx)} frames: {par[w]:.2f}s", flush=True)
        results["parallel"] = {
            "videos": 32,
            "frames_per_video": len(idx),
            "wall_s": {str(k): v for k, v in par.items()},
            "speedup": par[1] / par[cores] if cores > 1 else 1.0,
            "note": "includes process-pool start-up (forkserver)",
        }
        results["machine"]["load_avg_end"] = list(os.getloadavg())

        # targets ----------------------------------------------------------------------------------------
        items_long = next(r for r in rows if r["video"].startswith("h264 60s") and r["selection"] == "items")
        mem_ratio = mem[-1]["parent_maxrss_mb"] / mem[0]["parent_maxrss_mb"]
        trace_ratio = mem[-1]["parent_tracemalloc_peak_mb"] / max(1e-9, mem[0]["parent_tracemalloc_peak_mb"])
        worker_ratio = mem[-1]["workers_maxrss_mb"] / mem[0]["workers_maxrss_mb"]
        results["targets"] = {
            "extract_vs_decode_only (<= 1.5)": {
                "value": items_long["ratio_extract_vs_decode_only"],
                "met": items_long["ratio_extract_vs_decode_only"] <= 1.5,
            },
            "speedup_vs_naive_seek_item_order_long_gop_h264 (>= 3)": {
                "value": items_long["naive_cv2_seek"]["item_order"]["speedup"],
                "met": items_long["naive_cv2_seek"]["item_order"]["speedup"] >= 3,
            },
            "speedup_vs_naive_seek_sorted_long_gop_h264 (>= 3)": {
                "value": items_long["naive_cv2_seek"]["sorted"]["speedup"],
                "met": items_long["naive_cv2_seek"]["sorted"]["speedup"] >= 3,
            },
            "parent_maxrss_ratio_largest_vs_smallest (~1)": {"value": mem_ratio, "met": mem_ratio <= 1.25},
            "workers_maxrss_ratio_largest_vs_smallest (~1)": {"value": worker_ratio, "met": worker_ratio <= 1.25},
            "parent_tracemalloc_ratio (informative: rows grow with requests)": {"value": trace_ratio},
            "parallel_speedup": {"value": results["parallel"]["speedup"], "cores": cores},
            "frames_exact": {"met": all(r["extract_wrong"] == 0 for r in rows)},
        }
        print_table(results)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True, default=str) + "\n")
        print(f"written {RESULTS.relative_to(REPO)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(results: dict) -> None:
    print()
    print(
        f"decode-only baseline: {results['decode_only_baseline']}; cores: {results['machine']['cores']}; "
        f"load avg {results['machine']['load_avg_start'][0]:.1f} -> {results['machine']['load_avg_end'][0]:.1f}"
    )
    hdr = (
        f"{'video':26s} {'select':9s} {'req':>4s} {'extract s':>9s} {'frames/s':>8s} {'dec-only s':>10s} "
        f"{'ratio':>5s} {'naive-sorted s':>14s} {'x':>5s} {'naive-items s':>13s} {'x':>5s} {'pyav s':>6s} "
        f"{'decord s':>8s}"
    )
    print(hdr)
    print("-" * len(hdr))
    nan = float("nan")
    for r in results["per_video"]:
        naive = r["naive_cv2_seek"] or {}
        ns, ni = naive.get("sorted", {}), naive.get("item_order", {})
        dc = r["read_frames_s"]
        fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "n/a"
        print(
            f"{r['video']:26s} {r['selection']:9s} {r['requested']:4d} {r['extract_s']:9.3f} "
            f"{r['extract_fps']:8.0f} {r['decode_only_s']:10.3f} {r['ratio_extract_vs_decode_only']:5.2f} "
            f"{ns.get('s', nan):14.3f} {ns.get('speedup', nan):5.1f} {ni.get('s', nan):13.3f} "
            f"{ni.get('speedup', nan):5.1f} {fmt(dc.get('pyav')):>6s} {fmt(dc.get('decord')):>8s}"
        )
    print()
    for m in results["memory"]:
        print(
            f"memory: {m['videos']:3d} videos ({m['frames']} frames): parent maxrss {m['parent_maxrss_mb']:.0f} MB, "
            f"tracemalloc peak {m['parent_tracemalloc_peak_mb']:.1f} MB, workers maxrss {m['workers_maxrss_mb']:.0f} MB"
        )
    p = results["parallel"]
    print(
        f"pool: {p['videos']} videos: "
        + ", ".join(f"{k} worker(s) {v:.2f}s" for k, v in p["wall_s"].items())
        + f" -> speedup {p['speedup']:.2f}x"
    )
    print()
    for name, t in results["targets"].items():
        v = t.get("value")
        met = t.get("met")
        print(
            f"target {name}: "
            + (f"{v:.2f} " if isinstance(v, float) else "")
            + ("" if met is None else ("MET" if met else "NOT MET"))
        )


if __name__ == "__main__":
    sys.exit(main())
