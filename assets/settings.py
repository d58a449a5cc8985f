"""The `build` resource: which configuration a run uses. Its fields travel in the run config, so a step in another
process (multiprocess, Dask, a Kubernetes pod) resolves exactly the configuration the launching process chose."""

from __future__ import annotations

import json

import dagster as dg

from pipeline.config import load_config


class BuildSettings(dg.ConfigurableResource):
    """Empty fields mean: the repository's configs/ and its defaults."""

    config_dir: str = ""
    scale: str = ""  # demo | release; empty = configs/build.yaml
    upstream_json: str = "{}"  # {"gm100": "/data/gm100", ...}: upstream roots overriding configs/sources.yaml
    work_dir: str = ""
    release_dir: str = ""
    sources: str = ""  # comma-separated subset of build.sources; empty = all

    def config(self) -> dict:
        cfg = load_config(self.config_dir or None, upstream=json.loads(self.upstream_json or "{}"),
                          scale=self.scale or None)
        if self.work_dir:
            cfg["build"]["work_dir"] = self.work_dir
        if self.release_dir:
            cfg["build"]["release_dir"] = self.release_dir
        if self.sources:
            cfg["build"]["sources"] = [s for s in cfg["build"]["sources"] if s in self.sources.split(",")]
        return cfg


def settings_from(config_dir: str = "", scale: str = "", upstream: dict | None = None, work_dir: str = "",
                  release_dir: str = "", sources: list[str] | None = None) -> BuildSettings:
    return BuildSettings(config_dir=config_dir, scale=scale, upstream_json=json.dumps(upstream or {}),
                         work_dir=work_dir, release_dir=release_dir, sources=",".join(sources or []))
