"""Publishing the release: one build at a time, a staging folder, and one atomic step once every check passed.

    with build_lock(cfg, token):          # LockError names the holder (pid, start time) of a running build;
        ...                               # ReleaseFolderError says why the release folder cannot be published to
    staged = staging_config(cfg)          # the release step writes into <parent>/.<release>.staging
    publish(cfg)                          # staging -> an immutable version; the release link swapped in one rename

The release folder `release` is a symbolic link to a version folder beside it (same filesystem):
    release -> .release.versions/<n>   what readers open; replaced by one rename of a new link over it (rename(2)
                                       is atomic: a reader sees the old release or the new one, never none)
    .release.versions/<n>              one immutable folder per published release (never written after it is
                                       published; the current one and the one before are kept, so a reader that
                                       resolved the old link finishes on it)
    .release.lock                      who builds into this release now (pid, start time, token); locked with flock
    .release.staging                   the release being built; published only when every blocking check passed
A release folder that is a real folder (a release published before versions existed) is exchanged for the link in
one step too (renameat2 RENAME_EXCHANGE, Linux) and then moved into the versions. Refused up front, with the reason
(`check_release_folder`): a release folder that is a mount point (it cannot be renamed), a symbolic link this build
did not make (publishing would replace the link and leave what it points at stale: point the build at the target
instead), and a parent folder the build cannot write (the swap renames beside the release).
The work folder has its own `.build.lock`. flock is released by the kernel when its process dies, so a lock left by
a killed build is taken over by the next one; the JSON in the file only says who holds it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import logging
import os
import shutil
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.io import clean_temp_files
from pipeline.settings.paths import release_dir, work_dir

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

WORK_LOCK = ".build.lock"
log = logging.getLogger(__name__)


class LockError(RuntimeError):
    """Another build holds the work folder or the release folder."""


class ReleaseFolderError(RuntimeError):
    """The release folder cannot be published to (a mount point, a foreign symbolic link, an unwritable parent)."""


def _beside(release: Path, what: str) -> Path:
    return release.parent / f".{release.name}.{what}"


def staging_dir(cfg: Settings) -> Path:
    return _beside(release_dir(cfg), "staging")


def previous_dir(cfg: Settings) -> Path:
    """Where the swap of a release published before versions existed could leave the last good release."""
    return _beside(release_dir(cfg), "previous")


def versions_dir(cfg: Settings) -> Path:
    return _beside(release_dir(cfg), "versions")


def current_version(cfg: Settings) -> str | None:
    """The version folder the release link points at (its name), or None (no release, or not a link of ours)."""
    rel = release_dir(cfg)
    try:
        target = Path(os.readlink(rel))
    except OSError:
        return None
    return target.name if target.parent.as_posix() == f"{versions_dir(cfg).name}" else None


def check_release_folder(cfg: Settings) -> None:
    """ReleaseFolderError, before anything is built, when the release folder cannot be published to."""
    rel = release_dir(cfg)
    parent = rel.parent
    if rel.is_symlink():
        if current_version(cfg) is None:
            raise ReleaseFolderError(
                f"the release folder {rel} is a symbolic link to {os.readlink(rel)} that this build did not make: "
                "publishing replaces the link (what it points at would stay stale); set the release folder "
                f"(build.release_dir, --release-dir) to {os.path.realpath(rel)} to publish there, or remove the link"
            )
    elif rel.is_dir() and os.path.ismount(rel):
        raise ReleaseFolderError(
            f"the release folder {rel} is a mount point: it cannot be replaced by a rename; set "
            f"the release folder (build.release_dir, --release-dir) to a folder inside it, e.g. "
            f"{rel / 'release'}"
        )
    elif rel.exists() and not rel.is_dir():
        raise ReleaseFolderError(f"the release folder {rel} exists and is not a folder")
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ReleaseFolderError(
            f"the folder holding the release ({parent}) is not writable: the release is published by a rename beside it"
        )


def lock_files(cfg: Settings) -> list[Path]:
    return [work_dir(cfg) / WORK_LOCK, _beside(release_dir(cfg), "lock")]


def staging_config(cfg: Settings) -> Settings:
    """The config whose release folder is the staging folder: what the release step and its checks run on."""
    return cfg.with_values({"build.release_dir": str(staging_dir(cfg))})


# ------------------------------------------------------------------------------------------------- the lock
def holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def _describe(info: dict) -> str:
    if not info:
        return "another process"
    return (
        f"pid {info.get('pid')} on {info.get('host', '?')} since {info.get('started', '?')}"
        f" ({info.get('command', '?')})"
    )


@contextmanager
def build_lock(cfg: Settings, token: str, clean: bool = True):
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
                raise LockError(
                    f"another build is running: {path} is held by {_describe(holder(path))}; "
                    f"wait for it to finish (or stop it) and build again"
                ) from None
            fds.append(fd)
            info = {
                "pid": os.getpid(),
                "host": os.uname().nodename,
                "token": token,
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:300],
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info, sort_keys=True) + "\n").encode(), 0)
        check_release_folder(cfg)
        yield clean_leftovers(cfg) if clean else []
    finally:
        for fd in fds:  # the file stays (unlinking a locked file races with a process that just opened it)
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)


def clean_leftovers(cfg: Settings) -> list[str]:
    """What killed builds left, removed under the lock: temp files of atomic writes in the work and release folders,
    an unpublished staging folder, a temporary link, version folders the release no longer needs, and a previous
    release a crash left mid-swap under the old two-rename scheme (put back when the release is missing). Returns a
    description of each."""
    done = []
    rel, prev, stage = release_dir(cfg), previous_dir(cfg), staging_dir(cfg)
    if prev.is_dir():
        if not os.path.lexists(rel):
            os.rename(prev, rel)
            done.append(f"restored the last good release from {prev.name}")
        else:
            done += _remove(prev, f"removed {prev.name}")
    if stage.exists():
        shutil.rmtree(stage)
        done.append(f"removed the unpublished {stage.name}")
    link = _beside(rel, "link")
    if os.path.lexists(link):
        os.unlink(link)
        done.append(f"removed the temporary link {link.name}")
    for legacy in sorted(rel.parent.glob(f".{rel.name}.legacy*")) if rel.parent.is_dir() else []:
        done += _remove(legacy, f"removed {legacy.name}")
    done += _prune_versions(cfg)
    for root in (work_dir(cfg), rel):
        if root.is_dir():
            done += [
                f"removed temp file {p.relative_to(root.parent).as_posix()}" for p in clean_temp_files(root.resolve())
            ]
    return done


def _remove(path: Path, what: str) -> list[str]:
    """rmtree that never fails the build: a folder it cannot remove (read-only, busy) is said, and left."""
    failed: list[str] = []
    shutil.rmtree(path, onerror=lambda _f, p, exc: failed.append(f"{p}: {exc[1]}"))
    if failed and path.exists():
        log.warning("could not remove %s (%s): remove it by hand", path, failed[0])
        return [f"could not remove {path.name} ({failed[0]}); remove it by hand"]
    return [what]


def _prune_versions(cfg: Settings) -> list[str]:
    """Drop the version folders but the current one and the one published before it."""
    vdir = versions_dir(cfg)
    if not vdir.is_dir():
        return []
    current = current_version(cfg)
    names = sorted((p.name for p in vdir.iterdir() if p.name.isdigit()), key=int)
    keep = {current} if current else set()
    older = [n for n in names if current and n.isdigit() and int(n) < int(current)]
    keep |= set(older[-1:])
    done = []
    for p in sorted(vdir.iterdir()):
        if p.name not in keep:
            done += _remove(p, f"removed the old release version {p.name}")
    return done


# ------------------------------------------------------------------------------------------------- the swap
def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clear_staging(cfg: Settings) -> Path:
    stage = staging_dir(cfg)
    shutil.rmtree(stage, ignore_errors=True)
    return stage


def _exchange(a: Path, b: Path) -> bool:
    """Swap two names in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(cfg: Settings) -> Path:
    """Make the staging folder the release in one step: staging -> .versions/<n> (a rename), then a new link
    `release -> .versions/<n>` renamed over the old link (atomic: readers see the old release or the new one). A
    release folder from before versions (a real folder) is exchanged for the link in one step where the system can
    (else renamed aside first: the one moment without a release, once). Returns the release path."""
    check_release_folder(cfg)
    rel, stage, vdir = release_dir(cfg), staging_dir(cfg), versions_dir(cfg)
    if not stage.is_dir():
        raise FileNotFoundError(f"nothing staged to publish ({stage.name} is missing)")
    vdir.mkdir(exist_ok=True)
    numbers = [int(p.name) for p in vdir.iterdir() if p.name.isdigit()]
    version = vdir / str(max(numbers, default=0) + 1)
    os.rename(stage, version)
    link = _beside(rel, "link")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(f"{vdir.name}/{version.name}", link)
    if rel.is_dir() and not rel.is_symlink():  # a release published before versions: a real folder
        legacy = _beside(rel, "legacy")
        while os.path.lexists(legacy):
            legacy = legacy.with_name(legacy.name + "+")
        if _exchange(link, rel):  # the link is the release now; the old folder is under the link's name
            os.rename(link, legacy)
        else:
            os.rename(rel, legacy)
            os.rename(link, rel)
        _fsync_dir(rel.parent)
        _remove(legacy, "")  # a read-only one stays, said in the log (and retried by the next build's lock)
    else:
        os.replace(link, rel)
        _fsync_dir(rel.parent)
    _prune_versions(cfg)
    return rel
