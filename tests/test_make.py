"""The README's two commands in a clone whose path holds a space (issue 31: `/bin/sh: 1: cannot create /tmp/sp: Is a
directory` from the Makefile's DAGSTER_HOME target), and the Makefile's choice of Python.

The clone's `make rebuild` is also the suite's determinism check across engines: a cold build with a fresh work folder
and frame cache on the default engine (multiprocess), whose release must equal, byte for byte, the session's demo
build (in_process), which test_e2e compares with the committed lock. The Dask engine's build is compared the same
way in tests/test_dask_cluster.py."""

from __future__ import annotations

import os
import shlex
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from factories import digest_tree

REPO = Path(__file__).resolve().parent.parent


def _clone(dest: Path) -> Path:
    """The repository's files as they are now (tracked and new), without .venv or build outputs."""
    names = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def _seed_venv(clone: Path) -> None:
    """A .venv for the clone that sees this suite's installed packages (a .pth line), so `make` installs only the
    clone itself (-e .) instead of downloading the lock again; the Makefile's own recipe does the installing."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(clone / ".venv")], check=True)
    inner = next((clone / ".venv" / "lib").glob("python3.*/site-packages"))
    (inner / "_suite_packages.pth").write_text(site.getsitepackages()[0] + "\n")


def test_the_makefile_finds_a_supported_python_or_says_which_it_needs(tmp_path):
    shown = tmp_path / "show.mk"
    shown.write_text('show:\n\t@echo "[$(PYTHON)]"\n')  # read after the Makefile (-f twice): no `include`,
    # which would split a repository path that holds a space
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    for name in ("python3.13", "python3.12", "python3.11", "python3"):  # a 3.10 first on the PATH is passed over
        works = "#!/bin/sh\nexec " + shlex.quote(sys.executable) + ' "$@"\n'  # may hold a space
        (bin_dir / name).write_text(works if name == "python3.12" else "#!/bin/sh\necho 'Python 3.10' >&2; exit 1\n")
        (bin_dir / name).chmod(0o755)
    out = subprocess.run(
        ["make", "-s", "-f", str(REPO / "Makefile"), "-f", str(shown), "show"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "[python3.12]"
    for name in ("python3.12",):
        (bin_dir / name).unlink()
    empty = {**env, "PATH": str(bin_dir)}
    out = subprocess.run(
        ["/usr/bin/make", "-s", "VENV=" + str(tmp_path / "v"), "venv"],
        cwd=REPO,
        env=empty,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "processbench needs Python 3.11, 3.12 or 3.13" in out.stderr and out.stderr.count("\n") <= 2


def _seed_lmms_venv(clone: Path) -> None:
    """The suite's own lmms-eval virtualenv (built by `make test` before the suite), linked into the clone: the
    clone's lock keeps its mtime (copy2), so `make test` there finds it up to date instead of installing 2.5 GB again.
    Without one (pytest run directly), the clone's `make test` builds its own."""
    if (REPO / ".venv-lmms" / ".installed").is_file():
        (clone / ".venv-lmms").symlink_to(REPO / ".venv-lmms", target_is_directory=True)


@pytest.mark.slow
def test_the_two_commands_work_in_a_clone_whose_path_has_a_space(demo_samples, demo_release, tmp_path):
    clone = _clone(tmp_path / "my clones" / "process bench")
    _seed_venv(clone)
    _seed_lmms_venv(clone)
    # the demo corpora of this session (with their generator records), so `make rebuild` does not encode them again
    shutil.copytree(next(iter(demo_samples.values())).parent, clone / "build" / "samples" / "demo")
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "VIRTUAL_ENV", "MAKEFLAGS")}
    rebuild = subprocess.run(["make", "rebuild"], cwd=clone, env=env, capture_output=True, text=True)
    assert rebuild.returncode == 0, rebuild.stdout[-3000:] + rebuild.stderr[-3000:]
    assert f"release published: {clone / 'release'}" in rebuild.stdout and "release: valid" in rebuild.stdout
    assert (clone / ".dagster_home" / "dagster.yaml").is_file()
    # another engine, another folder (with a space), a fresh work folder: the same bytes as the session's build
    first, again = digest_tree(demo_release), digest_tree(clone / "release")
    assert sorted(first) == sorted(again)
    assert [f for f in first if first[f] != again[f]] == []
    # the second command, on a small part of the suite (the whole suite runs it in this very process)
    test = subprocess.run(
        ["make", "test", "TESTS=tests/test_layout.py"], cwd=clone, env=env, capture_output=True, text=True
    )
    assert test.returncode == 0 and " passed" in test.stdout, test.stdout[-3000:] + test.stderr[-3000:]
