"""Errors the build raises itself, whose message already says what is wrong and what to do.

`ProjectError`: `processbench` prints one line for it (no trace), and a Dagster step that raises it fails with that
line as its failure description (assets/definitions.py), so the terminal and the UI say the same thing. A trace is
kept for what the project did not foresee (a bug), where it is what a developer needs."""

from __future__ import annotations

from upstream_adapters import AdapterOptionError


class ProjectError(Exception):
    """A failure the build foresaw, explained in its message (one line: what, where (full path), what to do)."""


class SourceUnusable(ProjectError):
    """A source whose root holds no unit the adapter can read (empty, another source's layout, one level off):
    its chain stops at ingest, with the expected layout and the nearest folder that holds it
    (pipeline/source_help.py)."""


# what `processbench` prints as one line and a step reports as its failure description (no trace)
EXPLAINED = (ProjectError, AdapterOptionError)
