"""Publishing the release: one build at a time, a staging folder, and a swap only after every check passed.

    with build_lock(cfg, token):          # LockError names the holder (pid, start time) of a running build
        ...                               # the lock also cleans what a killed build left (see `clean_leftovers`)
    staged = staging_config(cfg)          # the release step writes into <parent>/.<release>.staging
    publish(cfg)                          # swap staging -> release; the old release goes away only afterwards

Beside the release folder `release/` (same filesystem, so the renames are atomic):
    .release.lock       who builds into this release now (pid, start time, token); locked with flock
    .release.staging    the release being built; published only when every blocking check passed
    .release.previous   the last good release during the swap (a crash between the two renames leaves it; the next
                        build puts it back)
The work folder has its own `.build.lock`. flock is released by the kernel when its process dies, so a lock left by
a killed build is taken over by the next one; the JSON in the file only says who holds it.
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import shutil
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .config import path_in_repo
from .io import clean_temp_files

WORK_LOCK = ".build.lock"


class LockError(RuntimeError):
    """Another build holds the work folder or the release folder."""


def release_dir(cfg: dict) -> Path:
    return path_in_repo(cfg["build"]["release_dir"])


def work_dir(cfg: dict) -> Path:
    return path_in_repo(cfg["build"]["work_dir"])


def _beside(release: Path, what: str) -> Path:
    return release.parent / f".{release.name}.{what}"


def staging_dir(cfg: dict) -> Path:
    return _beside(release_dir(cfg), "staging")


def previous_dir(cfg: dict) -> Path:
    return _beside(release_dir(cfg), "previous")


def lock_files(cfg: dict) -> list[Path]:
    return [work_dir(cfg) / WORK_LOCK, _beside(release_dir(cfg), "lock")]


def staging_config(cfg: dict) -> dict:
    """The config whose release folder is the staging folder: what the release step and its checks run on."""
    out = dict(cfg)
    out["build"] = copy.deepcopy(cfg["build"])
    out["build"]["release_dir"] = str(staging_dir(cfg))
    return out


# ------------------------------------------------------------------------------------------------- the lock
def holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def _describe(info: dict) -> str:
    if not info:
        return "another process"
    return (f"pid {info.get('pid')} on {info.get('host', '?')} since {info.get('started', '?')}"
            f" ({info.get('command', '?')})")


@contextmanager
def build_lock(cfg: dict, token: str, clean: bool = True):
    """Hold the work folder's and the release folder's locks for one build. When the locks already name `token`,
    the launching process holds them (a CLI build whose run executes in this or a child process): nothing to do.
    Otherwise take them (non-blocking) or raise LockError naming the holder; then clean the leftovers of killed
    builds. Yields the list of what was cleaned (empty when already held)."""
    paths = lock_files(cfg)
    if token and all(holder(p).get("token") == token for p in paths):
        yield []
        return
    fds: list[int] = []
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise LockError(f"another build is running: {path} is held by {_describe(holder(path))}; "
                                f"wait for it to finish (or stop it) and build again") from None
            fds.append(fd)
            info = {"pid": os.getpid(), "host": os.uname().nodename, "token": token,
                    "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "command": " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:300]}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info, sort_keys=True) + "\n").encode(), 0)
        yield clean_leftovers(cfg) if clean else []
    finally:
        for fd in fds:  # the file stays (unlinking a locked file races with a process that just opened it)
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)


def clean_leftovers(cfg: dict) -> list[str]:
    """What killed builds left, removed under the lock: temp files of atomic writes in the work and release folders,
    an unpublished staging folder, and a previous release a crash left mid-swap (put back when the release is
    missing). Returns a description of each."""
    done = []
    rel, prev, stage = release_dir(cfg), previous_dir(cfg), staging_dir(cfg)
    if prev.is_dir():
        if not rel.exists():
            os.rename(prev, rel)
            done.append(f"restored the last good release from {prev.name}")
        else:
            shutil.rmtree(prev)
            done.append(f"removed {prev.name}")
    if stage.exists():
        shutil.rmtree(stage)
        done.append(f"removed the unpublished {stage.name}")
    for root in (work_dir(cfg), rel):
        if root.is_dir():
            done += [f"removed temp file {p.relative_to(root.parent).as_posix()}" for p in clean_temp_files(root)]
    return done


# ------------------------------------------------------------------------------------------------- the swap
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_staging(cfg: dict) -> Path:
    stage = staging_dir(cfg)
    shutil.rmtree(stage, ignore_errors=True)
    return stage


def publish(cfg: dict) -> Path:
    """Replace the release folder by the staging folder: release -> .previous, staging -> release, drop .previous.
    Each step is one rename on one filesystem; a crash between the two leaves .previous, which the next build's
    `clean_leftovers` puts back."""
    rel, prev, stage = release_dir(cfg), previous_dir(cfg), staging_dir(cfg)
    if not stage.is_dir():
        raise FileNotFoundError(f"nothing staged to publish ({stage.name} is missing)")
    shutil.rmtree(prev, ignore_errors=True)
    if rel.exists():
        os.rename(rel, prev)
    os.rename(stage, rel)
    _fsync_dir(rel.parent)
    shutil.rmtree(prev, ignore_errors=True)
    return rel
