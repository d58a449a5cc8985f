"""Two builds from the same inputs, each with a fresh work folder and frame cache, give byte-identical release files."""

from __future__ import annotations

import hashlib

from conftest import build_demo


def digest_tree(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_builds_identical(demo_samples, demo_release, tmp_path):
    second = build_demo(demo_samples, tmp_path)
    first, again = digest_tree(demo_release), digest_tree(second)
    assert sorted(first) == sorted(again)
    assert [f for f in first if first[f] != again[f]] == []
