"""Shared fixtures: the demo sample corpora and one demo build through Dagster, made once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from factories import build_demo
from pipeline.settings.config import load_settings

os.environ.setdefault("PYTHONHASHSEED", "0")

# The session's demo corpora and demo build take minutes: a test using them is an end-to-end one, marked `slow`
# (`make test-fast` runs `-m "not slow"`); a test that builds in another way carries the marker itself.
SLOW_FIXTURES = {"demo_samples", "demo_release"}


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def demo_samples(tmp_path_factory) -> dict[str, Path]:
    """The four demo corpora written by the sample generators (the same ones `make rebuild` builds from)."""
    from pipeline.publish.provenance import write_sample_record
    from upstream_adapters import write_samples

    cfg = load_settings(scale="demo")
    root = tmp_path_factory.mktemp("samples")
    out = {}
    for slug in cfg.build.sources:
        write_samples(slug, root / slug, scale="demo", seed=cfg.build.samples.seed)
        # what `processbench samples` records: the release's provenance then says "samples", as the locked demo does
        write_sample_record(slug, root / slug, "demo", cfg.build.samples.seed, cfg.sources[slug].adapter.options())
        out[slug] = root / slug
    return out


@pytest.fixture(scope="session")
def demo_release(demo_samples, tmp_path_factory) -> Path:
    return build_demo(demo_samples, tmp_path_factory.mktemp("build1"))


@pytest.fixture()
def identified_release(tmp_path):
    """(folder, cfg, fingerprint) of a release written by the writers (no exports) with its identity stated and its
    checksums written, as the release step ends (tests/factories.py build_identified)."""
    from factories import build_identified, make_cfg

    cfg = make_cfg()
    out = tmp_path / "release"
    return out, cfg, build_identified(out, cfg)
