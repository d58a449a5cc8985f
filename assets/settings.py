"""The `build` resource: which configuration a run uses (the fields of assets/options.py `BuildOptions`). Its fields
travel in the run config, so a step in another process (multiprocess, Dask, a Kubernetes pod) resolves exactly the
configuration the launching process chose."""

from __future__ import annotations

import dagster as dg

from .options import BuildOptions


class BuildSettings(dg.ConfigurableResource, BuildOptions):
    """Empty fields mean: the repository's configs/ and its defaults."""
