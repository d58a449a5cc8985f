"""Fault injection for publishing (docs/running.md "Publishing"): kill -9 a build at N points and check that the
published release is byte for byte the last good one, that it validates, and that the next build's lock leaves no
stray file (staging, previous, `.tmp`); then start two builds at once and check that the second is refused.

    python bench/fault_publish.py [--source aist] [--points 8] [--executor in_process] [--window 0.6 1.0]
                                  [--in-release 8]

The kill points are spread evenly over a window of a full recompute's duration (measured first; default the whole
build; `--window 0.6 1.0` aims at its end). `--in-release N` adds N kills timed from the moment the release step
creates its staging folder, spread over the release step's measured duration (writes, checks, swap).

Prints one line per fault and the counts (tried / survived). Numbers, not pass/fail: the tests assert the mechanisms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline import publish  # noqa: E402 - after sys.path names the repository
from pipeline.publish.validate import validate_release  # noqa: E402 - after sys.path names the repository
from pipeline.settings.config import load_settings  # noqa: E402 - after sys.path names the repository
from pipeline.settings.root import Settings  # noqa: E402 - after sys.path names the repository
from pipeline.settings import paths  # noqa: E402 - after sys.path names the repository


def _stray(cfg: Settings) -> list[str]:
    rel = paths.release_dir(cfg)
    kept = (rel.name, f".{rel.name}.lock", publish.versions_dir(cfg).name)  # the link, its lock, its versions
    out = [p.name for p in rel.parent.iterdir() if p.name not in kept]
    versions, current = publish.versions_dir(cfg), publish.current_version(cfg)
    if versions.is_dir():  # the version served and the one before it are kept; any other is left over
        keep = {current, str(int(current) - 1)} if current and current.isdigit() else {current}
        out += [f"{versions.name}/{v.name}" for v in versions.iterdir() if v.name not in keep]
    for root in (paths.work_dir(cfg), rel):
        out += [str(p.relative_to(root.parent)) for p in root.rglob("*.tmp")] if root.is_dir() else []
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default="aist")
    ap.add_argument("--points", type=int, default=8, help="kill points")
    ap.add_argument("--executor", default="in_process")
    ap.add_argument("--in-release", type=int, default=0, help="kills timed within the release step")
    ap.add_argument(
        "--window",
        type=float,
        nargs=2,
        default=(0.0, 1.0),
        metavar=("FROM", "TO"),
        help="kill between these fractions of a full recompute's duration",
    )
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fault_publish_"))
    env = dict(os.environ, DAGSTER_HOME=str(tmp / "dagster_home"), PYTHONHASHSEED="0")
    cli = [sys.executable, "-m", "assets.cli"]
    subprocess.run(
        cli + ["samples", "--scale", "demo", "--out", str(tmp / "samples"), "--sources", a.source],
        check=True,
        cwd=REPO,
        env=env,
        capture_output=True,
    )
    build = cli + [
        "build",
        "--scale",
        "demo",
        "--sources",
        a.source,
        "--upstream",
        f"{a.source}={tmp / 'samples' / a.source}",
        "--work-dir",
        str(tmp / "work"),
        "--release-dir",
        str(tmp / "out" / "release"),
        "--executor",
        a.executor,
    ]
    cfg = load_settings().with_values(
        {"build.work_dir": str(tmp / "work"), "build.release_dir": str(tmp / "out" / "release")}
    )
    t = time.time()
    subprocess.run(build, check=True, cwd=REPO, env=env, capture_output=True)
    full = time.time() - t

    def recompute() -> subprocess.Popen:
        """A build that recomputes every step (its fingerprints forgotten: --force alone skips unchanged steps)."""
        shutil.rmtree(tmp / "work" / "_fingerprints", ignore_errors=True)
        return subprocess.Popen(
            build, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    t = time.time()
    assert recompute().wait() == 0
    forced = time.time() - t
    good = (tmp / "out" / "release" / "checksums.sha256").read_bytes()
    lo, hi = a.window
    print(
        f"good build in {full:.0f}s, full recompute in {forced:.0f}s; killing a recomputing build at {a.points} "
        f"points between {lo * forced:.0f}s and {hi * forced:.0f}s"
    )
    tried = survived = 0

    def kill_and_inspect(proc, token: str, when: str) -> bool:
        """kill -9 the build (unless it has finished), then: is the release the good one, valid, and does the next
        build's start (taking the lock) leave nothing stray?"""
        finished = proc.poll() is not None
        if not finished:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        intact = (tmp / "out" / "release" / "checksums.sha256").read_bytes() == good
        problems = validate_release(tmp / "out" / "release")
        left = _stray(cfg)
        with publish.build_lock(cfg, token) as cleaned:
            pass
        after = _stray(cfg)
        print(
            f"kill -9 {when}{' (build had finished)' if finished else ''}: release intact={intact}, "
            f"valid={not problems}, left={left}, cleaned={len(cleaned)}, stray after next start={after}"
        )
        return intact and not problems and not after

    for i in range(a.points):
        delay = forced * (lo + (hi - lo) * (i + 1) / a.points)
        proc = recompute()
        time.sleep(delay)
        tried += 1
        survived += kill_and_inspect(proc, f"fault{i}", f"at {delay:5.1f}s")
    stage = publish.staging_dir(cfg)

    def start_and_wait_for_staging():
        proc = recompute()
        while proc.poll() is None and not stage.exists():
            time.sleep(0.02)
        return proc, time.time()

    if a.in_release:
        proc, t0 = start_and_wait_for_staging()
        proc.wait()
        span = time.time() - t0
        print(f"release step (staging created -> build exit): {span:.1f}s")
        for i in range(a.in_release):
            delay = span * i / a.in_release
            proc, t0 = start_and_wait_for_staging()
            time.sleep(max(0.0, delay - (time.time() - t0)))
            tried += 1
            survived += kill_and_inspect(proc, f"rel{i}", f"{delay:4.1f}s into the release step")
    # two builds at once on the same folders: the second is refused, the first publishes
    first = recompute()
    time.sleep(3)
    second = subprocess.run(
        build + ["--force", "--scale", "release"], cwd=REPO, env=env, capture_output=True, text=True
    )
    rc_first = first.wait()
    refused = second.returncode == 3 and "held by pid" in second.stderr
    same = (tmp / "out" / "release" / "checksums.sha256").read_bytes() == good
    tried += 1
    survived += refused and rc_first == 0 and same
    print(
        f"concurrent builds: second exit {second.returncode} ({second.stderr.strip().splitlines()[-1][:160]}), "
        f"first exit {rc_first}, release = the first's bytes: {same}"
    )
    print(f"faults tried {tried}, survived {survived} (work folder {tmp})")
    return 0 if tried == survived else 1


if __name__ == "__main__":
    sys.exit(main())
