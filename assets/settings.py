"""The `build` resource: which configuration a run uses. Its fields travel in the run config, so a step in another
process (multiprocess, Dask, a Kubernetes pod) resolves exactly the configuration the launching process chose."""

from __future__ import annotations

import dagster as dg

from pipeline.settings.config import load_settings
from pipeline.settings.root import Settings


class BuildSettings(dg.ConfigurableResource):
    """Empty fields mean: the repository's configs/ and its defaults."""

    config_dir: str = ""
    scale: str = ""  # demo | release; empty = configs/build.yaml
    upstream: dict[str, str] = {}  # {"gm100": "/data/gm100", ...}: upstream roots overriding configs/sources.yaml
    work_dir: str = ""
    release_dir: str = ""
    sources: list[str] = []  # a subset of build.sources; empty = all
    variants: dict[str, str] = {}  # {"T7": "public", ...}: template variants overriding the files' `variant`

    def config(self) -> Settings:
        cfg = load_settings(
            self.config_dir or None,
            upstream=dict(self.upstream),
            scale=self.scale or None,
            variants=dict(self.variants) or None,
        )
        over = {k: v for k, v in (("build.work_dir", self.work_dir), ("build.release_dir", self.release_dir)) if v}
        if self.sources:
            over["build.sources"] = [s for s in cfg.build.sources if s in self.sources]
        return cfg.with_values(over) if over else cfg
