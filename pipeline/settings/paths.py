"""The work and release folders of a build (build.work_dir, build.release_dir), relative to the repository."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.settings.config import path_in_repo

if TYPE_CHECKING:
    from pipeline.settings.root import Settings


def release_dir(cfg: Settings) -> Path:
    return path_in_repo(cfg.build.release_dir)


def work_dir(cfg: Settings) -> Path:
    return path_in_repo(cfg.build.work_dir)
