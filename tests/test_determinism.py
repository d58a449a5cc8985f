"""Two builds from the same inputs, each with a fresh work folder and frame cache, give byte-identical release files,
whatever engine runs the one Dagster run: the session's demo build runs in_process, the second one multiprocess (the
default); all equal the committed lock (test_e2e). The Dask engine builds the same bytes on a cluster started with
`dask scheduler` / `dask worker` (tests/test_dask_cluster.py)."""

from __future__ import annotations

import hashlib

import pytest

from factories import build_demo


def digest_tree(root):
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["multiprocess"])
def test_every_executor_builds_the_same_bytes(demo_samples, demo_release, tmp_path, executor):
    second = build_demo(demo_samples, tmp_path, executor=executor, max_concurrent=2)
    first, again = digest_tree(demo_release), digest_tree(second)
    assert sorted(first) == sorted(again)
    assert [f for f in first if first[f] != again[f]] == []
