"""`Settings`: the whole build configuration as one frozen, typed object (pipeline.settings.config.load_settings builds it).

    cfg.build.release_seed                    # configs/build.yaml (BuildFile)
    cfg.sources["gm100"].root                 # configs/sources.yaml, the root resolved to an absolute Path
    cfg.labels.speed.for_source("gm100")      # a per-source section: the source's rule (or None)
    cfg.tasks["T1"].quota["gm100"]            # configs/tasks/T1.yaml (TaskFile)
    cfg.tasks["T1"].for_source("gm100").question   # every per-source value of a template resolved for one source
    cfg.step_tasks["T13"].for_source("gm100").goal # the step track's templates (`track: steps`, pipeline/steps/)

Code reads attributes; `model_dump()` gives the plain dict only where the configuration is hashed (the provenance
config hash, the step fingerprints). A changed copy is `cfg.with_values({"build.work_dir": ...})`.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.settings.models import (
    BuildFile,
    ExportsFile,
    FramesFile,
    ReleaseFile,
    SourceEntry,
    SplitFile,
    TaskFile,
    ValidityFile,
)
from pipeline.settings.errors import ConfigError
from pipeline.settings.labels import LabelsFile
from pipeline.settings.steps import StepTaskFile
from pipeline.settings.types import Slug, Strict, TaskId


class Source(SourceEntry):
    """A source's entry as the build uses it: `root` resolved (upstream override, environment, {scale})."""

    root: Path


class Settings(Strict):
    """Every file of configs/ (fields in the order of their file names, then the task templates in task order: the
    multiple-choice families in `tasks`, the `track: steps` templates (T13, pipeline/steps/) in `step_tasks`)."""

    build: BuildFile
    exports: ExportsFile
    frames: FramesFile
    labels: LabelsFile
    release: ReleaseFile
    sources: dict[Slug, Source]
    split: SplitFile
    validity: ValidityFile
    tasks: dict[TaskId, TaskFile]
    step_tasks: dict[TaskId, StepTaskFile] = {}

    @property
    def task_ids(self) -> list[str]:
        """The task families (configs/tasks/T<n>.yaml), in task order."""
        return sorted(self.tasks, key=lambda t: int(t[1:]))

    def task_names(self) -> dict[str, str]:
        """Task id -> public task name: the template's `task_name`, else configs/release.yaml `task_names` (the
        loader checks that the two agree where both exist); in task order."""
        fallback = self.release.task_names
        for t in self.task_ids:  # the loader checks this too; a copy changed after loading is checked here
            name = self.tasks[t].task_name
            if name is not None and t in fallback and fallback[t] != name:
                raise ConfigError(
                    "configs/release.yaml",
                    f"release.task_names.{t}",
                    f"the task_name of configs/tasks/{t}.yaml ({name!r}); keep one",
                )
        names = {t: self.tasks[t].task_name or fallback[t] for t in self.task_ids}
        extra = {t: n for t, n in fallback.items() if t not in names}
        return dict(sorted({**names, **extra}.items(), key=lambda kv: int(kv[0][1:])))

    @property
    def split_seed(self) -> int:
        """The split's seed: split.seed, null = build.release_seed."""
        return int(self.build.release_seed if self.split.seed is None else self.split.seed)

    def with_values(self, values: dict[str, object]) -> Settings:
        """A copy with values set by dotted key path (`{"build.work_dir": "w", "labels.motion.rh20t": {...}}`; a
        path's last key is replaced whole, a new key is added), validated like a loaded config."""
        data = self.model_dump()
        for path, value in values.items():
            *head, last = path.split(".")
            node = data
            for key in head:
                node = node[key]
            node[last] = value
        return Settings.model_validate(data)
