"""Which configuration a build uses, as plain values (no Dagster): what `processbench build` plans with, and the fields
of the `build` resource (assets/settings.py `BuildSettings`), which travel in the run config so that a step in another
process (multiprocess, Dask, a Kubernetes pod) resolves exactly the configuration the launching process chose."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from pipeline.settings.config import load_settings

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


class BuildOptions(BaseModel):
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
