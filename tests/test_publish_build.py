"""The publish gate end to end, on a one-source demo build (AIST, in-process): a release whose checks fail is never
published, whether the run comes from `processbench build` or from the UI (a run without the CLI's lock tag); the
previous release stays byte for byte, with nothing left beside it; a second build is refused while one runs."""

from __future__ import annotations

import json
import os
import multiprocessing as mp
import shutil
import stat
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.cli import main
from factories import hold_build_lock
from pipeline import publish
from pipeline.settings.config import path_in_repo


@pytest.fixture(scope="module")
def built(demo_samples, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("publish")
    mp_ = pytest.MonkeyPatch()
    mp_.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    args = [
        "build",
        "--scale",
        "demo",
        "--sources",
        "aist",
        "--upstream",
        f"aist={demo_samples['aist']}",
        "--work-dir",
        str(tmp_path / "work"),
        "--release-dir",
        str(tmp_path / "out" / "release"),
        "--executor",
        "in_process",
    ]
    assert main(args) == 0
    yield args, tmp_path / "out" / "release"
    mp_.undo()


def _planted_config(tmp_path: Path) -> Path:
    """configs/ with a validity limit the demo cannot meet: the release's blocking validity_limits check fails."""
    cfg_dir = tmp_path / "configs_planted"
    shutil.copytree(path_in_repo("configs"), cfg_dir)
    doc = yaml.safe_load((cfg_dir / "validity.yaml").read_text())
    doc["validity"]["min_eval_items"] = 1
    doc["validity"]["limits"]["near_shared_fraction"] = 0.0
    (cfg_dir / "validity.yaml").write_text(yaml.safe_dump(doc))
    return cfg_dir


def _beside(release: Path) -> list[str]:
    return sorted(p.name for p in release.parent.iterdir() if p.name != ".release.lock")


def test_a_release_that_fails_its_checks_is_never_published(built, tmp_path):
    args, release = built
    good = (release / "checksums.sha256").read_bytes()
    prov = json.loads((release / "metadata" / "provenance.json").read_text())
    assert prov["sources_built"] == ["aist"] and prov["sources"]["aist"]["origin"] == "samples"
    assert prov["from_sample_data"] is True
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in release.rglob("*") if p.is_file())

    planted = _planted_config(tmp_path)
    import io
    from contextlib import redirect_stderr

    buf = io.StringIO()
    with redirect_stderr(buf):
        assert main(args + ["--config-dir", str(planted)]) == 1
    err = buf.getvalue()
    assert "release NOT published" in err and "validity_limits" in err
    assert (release / "checksums.sha256").read_bytes() == good
    assert main(["validate", str(release)]) == 0
    assert _beside(release) == [".release.versions", "release"]  # no staging or previous folder left

    # the same bad config from the UI: a run of the job without the CLI (no lock tag; the executor takes the lock)
    from assets.definitions import ASSETS, build_job
    from assets.settings import BuildSettings

    settings = BuildSettings(
        config_dir=str(planted),
        scale="demo",
        upstream={"aist": args[6].split("=", 1)[1]},
        work_dir=args[args.index("--work-dir") + 1],
        release_dir=str(release),
        sources=["aist"],
    )
    keys = [k for a in ASSETS if a.op.name == "release" for k in a.keys]
    with dg.execute_job(
        dg.reconstructable(build_job),
        instance=dg.DagsterInstance.get(),
        asset_selection=keys,
        run_config={
            "resources": {"build": {"config": settings.model_dump()}},
            "execution": {"config": {"in_process": {}}},
        },
    ) as res:
        assert not res.success
        failure = [e for e in res.all_events if e.is_step_failure][0]
        assert "release not published" in str(failure.event_specific_data)
    assert (release / "checksums.sha256").read_bytes() == good
    assert _beside(release) == [".release.versions", "release"]

    # the good config again: the release runs again (its record was dropped) and publishes the same bytes
    assert main(args) == 0
    assert (release / "checksums.sha256").read_bytes() == good


def test_an_upstream_error_check_blocks_publishing(built):
    from assets.checks import publish_problems
    from assets.settings import BuildSettings
    from assets.tables import all_steps

    args, release = built
    cfg = BuildSettings(
        scale="demo", work_dir=args[args.index("--work-dir") + 1], release_dir=str(release), sources=["aist"]
    ).config()
    steps = [s for s in all_steps(cfg) if not s.publishes]
    assert publish_problems(cfg, steps) == []
    cfg = cfg.model_copy(update={"build": cfg.build.model_copy(update={"max_quarantine_share": -1.0})})  # out of
    # range for the loader (0..1), so set past validation: every source now quarantines "too much"
    # the share is checked after ingest and again after labels (which may quarantine more units)
    assert publish_problems(cfg, steps) == [
        "ir/aist/quarantine:quarantine_share",
        "labels/aist/quarantine:quarantine_share",
    ]


def test_a_second_build_is_refused_while_one_holds_the_folders(built, capsys):
    args, release = built
    from pipeline.settings.config import load_settings

    cfg = load_settings().with_values(
        {"build.work_dir": args[args.index("--work-dir") + 1], "build.release_dir": str(release)}
    )
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=hold_build_lock, args=(cfg, "other", ready, stop))
    holder.start()
    try:
        assert ready.wait(60)
        assert main(args + ["--force"]) == 3
        err = capsys.readouterr().err
        assert "another build is running" in err and f"pid {holder.pid}" in err
    finally:
        stop.set()
        holder.join(30)
    assert publish.holder(publish.lock_files(cfg)[0]) == {}  # released


def _build_children(build_pid: int) -> list[int]:
    """Processes that inherited this build's pid (its step processes): /proc/<pid>/environ names it."""
    from assets.executors import BUILD_PID_ENV

    mark = f"{BUILD_PID_ENV}={build_pid}".encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != build_pid:
            try:
                if mark in (p / "environ").read_bytes().split(b"\0") and not _zombie(int(p.name)):
                    out.append(int(p.name))
            except OSError:
                continue
    return out


def _watching(pid: int) -> bool:
    """The process holds a pidfd: its watch of the build is armed (assets/executors.py watch_the_build)."""
    try:
        return any(os.readlink(fd) == "anon_inode:[pidfd]" for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_step_processes_die_with_a_killed_build(demo_samples, tmp_path):
    """kill -9 of `processbench build` (multiprocess executor) leaves no step process running on as an orphan."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"), "PYTHONHASHSEED": "0"}
    cmd = [
        sys.executable,
        "-m",
        "assets.cli",
        "build",
        "--scale",
        "demo",
        "--sources",
        "aist",
        "--upstream",
        f"aist={demo_samples['aist']}",
        "--work-dir",
        str(tmp_path / "work"),
        "--release-dir",
        str(tmp_path / "out" / "release"),
        "--executor",
        "multiprocess",
    ]
    proc = subprocess.Popen(cmd, cwd=path_in_repo("."), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, steps = time.time() + 180, []
        while not steps and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)  # a step process (forked by the executor's fork server) whose step has begun: it
            steps = [p for p in _build_children(proc.pid) if _watching(p)]  # watches the build
        assert steps, "no step process watching the build was seen before the build ended"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # the step processes, and every other process of the build (the fork server, decode workers), end with it;
        # a generous bound: on a loaded 2-core machine they take several seconds to notice and exit
        deadline = time.time() + 60
        running = lambda: [p for p in sorted(set(steps + _build_children(proc.pid))) if not _zombie(p)]
        while (alive := running()) and time.time() < deadline:
            time.sleep(0.05)
        assert not alive, f"processes {alive} of the killed build outlived it"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _build_children(proc.pid):
            os.kill(p, signal.SIGKILL)
