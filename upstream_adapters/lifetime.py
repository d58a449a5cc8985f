"""Child processes that die with the process that started them (frame-extraction pool workers, sample encoders).

A pool worker blocks on its task queue, whose write end every worker also holds, so it never sees EOF when the build
is killed with SIGKILL; with the forkserver start method every worker also holds the fork server's "alive" pipe, so
the fork server lives on too. `die_with(pid)` ends the calling process as soon as `pid` is gone:

- Linux: a pidfd of `pid` (os.pidfd_open) watched by a daemon thread, which sends SIGKILL to this process when the
  pidfd turns readable (the process exited); when `pid` is this process's parent (fork/spawn start), also
  prctl(PR_SET_PDEATHSIG, SIGKILL), which the kernel delivers even when this process is stuck in C code.
- elsewhere: the thread polls `pid` every `poll_s` seconds.

Once the workers are gone the fork server sees EOF on its alive pipe and exits by itself.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _watch(pid: int, fd: int | None, poll_s: float) -> None:
    if fd is not None:
        select.select([fd], [], [])  # a pidfd is readable once its process has exited
    else:
        while _alive(pid):
            time.sleep(poll_s)
    _kill_self()


def _set_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with(pid: int, poll_s: float = 1.0) -> None:
    """End this process (SIGKILL) as soon as process `pid` has exited. Call it first thing in the child."""
    pid = int(pid)
    if pid == os.getpid():
        return
    if os.getppid() == pid:
        _set_pdeathsig()
        if os.getppid() != pid:  # the parent died before the signal was armed
            _kill_self()
    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            _kill_self()
        except OSError:  # kernel without pidfd: poll instead
            fd = None
    threading.Thread(target=_watch, args=(pid, fd, poll_s), name=f"die-with-{pid}", daemon=True).start()
