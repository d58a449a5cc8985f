"""Shared fixtures: the demo sample corpora and one demo build through Dagster, made once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.config import load_config

os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(scope="session")
def demo_samples(tmp_path_factory) -> dict[str, Path]:
    """The four demo corpora written by the sample generators (the same ones `make rebuild` builds from)."""
    from pipeline.provenance import write_sample_record
    from upstream_adapters import write_samples

    cfg = load_config(scale="demo")
    root = tmp_path_factory.mktemp("samples")
    out = {}
    for slug in cfg["build"]["sources"]:
        write_samples(slug, root / slug, scale="demo", seed=cfg["build"]["samples"]["seed"])
        # what `processbench samples` records: the release's provenance then says "samples", as the locked demo does
        write_sample_record(slug, root / slug, "demo", cfg["build"]["samples"]["seed"],
                            cfg["sources"][slug].get("adapter", {}))
        out[slug] = root / slug
    return out


def build_demo(samples: dict[str, Path], out: Path, executor: str = "in_process", **kw) -> Path:
    """Run the `build` job in one Dagster run (a throw-away instance under `out`) into `out`/{work,release}."""
    import dagster as dg

    from assets.run import rebuild, settings_from

    settings = settings_from(scale="demo", upstream={k: str(v) for k, v in samples.items()},
                             work_dir=str(out / "work"), release_dir=str(out / "release"))
    (out / "dagster_home").mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.local_temp(str(out / "dagster_home"), overrides={"telemetry": {"enabled": False}}) as instance:
        result = rebuild(settings, instance=instance, log=lambda m: None, executor=executor, **kw)
    assert result["failed_checks"] == [], result["failed_checks"]
    assert result["steps"], "a fresh work folder must run every step"
    return out / "release"


@pytest.fixture(scope="session")
def demo_release(demo_samples, tmp_path_factory) -> Path:
    return build_demo(demo_samples, tmp_path_factory.mktemp("build1"))
