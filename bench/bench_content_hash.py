"""What the full-content upstream fingerprints cost (upstream_adapters/content_hash.py).

    .venv/bin/python bench/bench_content_hash.py [REPS]

On the configured sample corpora (build them first: `make rebuild`), for every source root:
- cold: every file read and hashed (no store), in MB/s;
- warm: the listing a no-op build computes (stat + a lookup in the store) against the listing of the older code
  (relative path, size, mtime: no content), best of REPS (default 3);
- raw: one 256 MiB file hashed from the page cache (sha256 throughput of content_hash's streamed read);
then `processbench build` planning with nothing stale (assets.run.plan), best of REPS: the no-op build's own cost,
with the content listing and with the mtime listing of the older code put back in its place.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path


def mtime_listing(root: Path) -> str:
    """The listing before content hashes: (relative path, size, mtime_ns) of every file."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            st = p.stat()
            h.update(f"{p.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str]) -> None:
    from assets.fingerprint import tree_listing
    from assets.run import plan
    from assets.settings import BuildSettings
    from pipeline.settings.config import load_settings
    from upstream_adapters import content_hash

    reps = int(argv[0]) if argv else 3
    cfg = load_settings()
    roots = {slug: cfg.sources[slug].root for slug in cfg.build.sources}
    total_bytes = total_files = 0
    with tempfile.TemporaryDirectory() as store:
        for slug, root in roots.items():
            files = [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
            size = sum(p.stat().st_size for p in files)
            content_hash.use_store(None)  # cold: this process has hashed nothing
            cold = best(lambda: (content_hash.use_store(None), tree_listing(root)), 1)
            content_hash.use_store(Path(store) / slug)
            tree_listing(root)  # fills the store
            content_hash.use_store(None)
            content_hash.use_store(Path(store) / slug)  # a new process's view: the store read from disk
            warm = best(lambda: tree_listing(root), reps)
            old = best(lambda: mtime_listing(root), reps)
            total_bytes, total_files = total_bytes + size, total_files + len(files)
            print(
                f"{slug:>10}: {len(files):5d} files {size / 1e6:8.1f} MB  cold {cold:6.2f} s "
                f"({size / 1e6 / max(cold, 1e-9):7.0f} MB/s)  warm listing {warm * 1e3:7.1f} ms  "
                f"mtime listing {old * 1e3:7.1f} ms",
                flush=True,
            )
        big = Path(store) / "big.bin"
        big.write_bytes(os.urandom(1 << 20) * 256)
        raw = best(lambda: content_hash._hash_file(big), reps)
        print(
            f"{'all':>10}: {total_files:5d} files {total_bytes / 1e6:8.1f} MB;  raw: 256 MiB in {raw:.2f} s "
            f"({268.4 / raw:.0f} MB/s)"
        )
    content_hash.use_store(None)
    settings = BuildSettings()
    stale = plan(settings)
    no_op = best(lambda: plan(settings), reps)
    from assets import fingerprint

    fingerprint.tree_listing = mtime_listing
    old_plan = best(lambda: plan(settings), reps)
    print(
        f"no-op plan (assets.run.plan, {len(stale)} stale step(s)): {no_op:.2f} s with content hashes, "
        f"{old_plan:.2f} s with the mtime listing"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
