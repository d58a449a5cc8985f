"""Load the build configuration: every YAML file under configs/, validated by its typed model (pipeline/settings/models.py),
as one frozen `Settings` object (pipeline/settings/root.py) with the defaults filled.

    cfg = load_settings()                  # configs/ of this repository
    cfg.build.release_seed                 # configs/build.yaml
    cfg.sources["gm100"].root              # configs/sources.yaml (resolved to an absolute Path at load time)
    cfg.labels, cfg.split, cfg.frames, cfg.release   # configs/<name>.yaml
    cfg.tasks["T1"].for_source("gm100")    # configs/tasks/T1.yaml, its per-source values resolved for one source

A misspelt key, a wrong type or an unknown file fails here (`ConfigError`: file, key path, what was expected), never
later as a silently used default. Thresholds, quotas, seeds and names live in these files only; code reads them from
here.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from pipeline.settings.errors import ConfigError, validate_file

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: ~20x faster, same values
CONFIG_DIR = REPO_ROOT / "configs"


def _read(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(path, "", f"valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(path, "", f"a mapping at the top level, got {type(data).__name__}")
    return data


def _section(path: Path, data: dict) -> dict:
    """A file holds its section under a key named like the file (`build:` in build.yaml), or the section itself."""
    if path.stem not in data:
        return data
    other = sorted(set(data) - {path.stem})
    if other:
        raise ConfigError(path, other[0], f"only the top-level key {path.stem!r}")
    return data[path.stem] or {}


def _rel(path: Path, config_dir: Path) -> str:
    try:
        return f"configs/{path.relative_to(config_dir).as_posix()}"
    except ValueError:
        return path.name


def read_settings(config_dir: Path | None = None, variants: dict[str, str] | None = None) -> dict:
    """Every file of `config_dir` validated and dumped (defaults filled), before roots and scale are applied.
    `variants` = {task_id: variant name}: those templates are read with that variant instead of the one their file
    names (`processbench build --variant T7=public`); a task id without a template is a ConfigError."""
    from pipeline.settings.models import FILE_MODELS

    config_dir = Path(config_dir or CONFIG_DIR)
    cfg: dict = {}
    for path in sorted(config_dir.glob("*.yaml")):
        name = _rel(path, config_dir)
        if path.stem not in FILE_MODELS:
            raise ConfigError(
                name,
                "",
                f"a known config file ({', '.join(f'{k}.yaml' for k in FILE_MODELS)}); "
                "a new file needs its model in pipeline/settings/models.py",
            )
        cfg[path.stem] = validate_file(FILE_MODELS[path.stem], _section(path, _read(path)), name, path.stem)
    missing = sorted(set(FILE_MODELS) - set(cfg))
    if missing:
        raise ConfigError(f"configs/{missing[0]}.yaml", "", "the file to exist (every config file is required)")
    chosen = dict(variants or {})
    paths = sorted((config_dir / "tasks").glob("*.yaml"))
    unknown = sorted(set(chosen) - {p.stem for p in paths})
    if unknown:
        raise ConfigError(
            f"configs/tasks/{unknown[0]}.yaml",
            "variant",
            f"an existing task template (a variant was asked for {', '.join(unknown)})",
        )
    tasks = {path.stem: read_task(path.stem, config_dir, chosen.get(path.stem)) for path in paths}
    # a `track: steps` template (T13 process verification) is not a multiple-choice family: kept apart
    cfg["tasks"] = dict(
        sorted(((k, t) for k, t in tasks.items() if t.get("track") != "steps"), key=lambda kv: int(kv[0][1:]))
    )
    cfg["step_tasks"] = dict(
        sorted(((k, t) for k, t in tasks.items() if t.get("track") == "steps"), key=lambda kv: int(kv[0][1:]))
    )
    _cross_checks(cfg)
    return cfg


def read_task(task_id: str, config_dir: Path | None = None, variant: str | None = None) -> dict:
    """One task template (configs/tasks/<task_id>.yaml) validated, with its `variant` (or the one given) applied."""
    from pipeline.settings.models import StepTaskFile, TaskFile

    config_dir = Path(config_dir or CONFIG_DIR)
    path = config_dir / "tasks" / f"{task_id}.yaml"
    name = _rel(path, config_dir)
    if not path.stem[1:].isdigit() or path.stem[0] != "T":
        raise ConfigError(name, "", "a task template named T<n>.yaml")
    raw = _read(path)
    model = StepTaskFile if isinstance(raw, dict) and raw.get("track") == "steps" else TaskFile
    t = validate_file(model, apply_variant(raw, name, variant), name)
    if t["task_id"] != path.stem:
        raise ConfigError(name, "task_id", f"{path.stem!r} (the file name), got {t['task_id']!r}")
    return t


def apply_variant(raw: dict, file: str = "", variant: str | None = None) -> dict:
    """A task template with its chosen variant applied: `variant: NAME` (or the `variant` argument) replaces each
    top-level key that `variants.NAME` lists (whole values, no deep merge), so a variant states every key it changes.
    `variant: default` (or none) keeps the template's own keys. The result keeps `variant` (the name in use) and
    drops `variants`; an unknown name is a ConfigError."""
    raw = dict(raw)
    variants = raw.pop("variants", None) or {}
    name = variant if variant is not None else raw.get("variant")
    if name in (None, "default"):
        raw["variant"] = "default"
        return raw
    if not isinstance(variants, dict) or name not in variants:
        known = ", ".join(map(str, variants)) or "none"
        raise ConfigError(file, "variant", f"'default' or a key of variants ({known}), got {name!r}")
    over = variants[name] or {}
    if not isinstance(over, dict) or {"task_id", "variant", "variants"} & set(over):
        raise ConfigError(file, f"variants.{name}", "a mapping of template keys (not task_id / variant / variants)")
    return {**raw, **over, "variant": name}


def _cross_checks(cfg: dict) -> None:
    """What one file's model cannot see: names that must agree across files (or keys of one file)."""
    if cfg["build"]["scale"] not in cfg["build"]["quota_scale"]:
        raise ConfigError(
            "configs/build.yaml",
            "build.scale",
            f"one of {sorted(cfg['build']['quota_scale'])} (the quota_scale keys), got {cfg['build']['scale']!r}",
        )
    for i, slug in enumerate(cfg["build"]["sources"]):
        if slug not in cfg["sources"]:
            raise ConfigError(
                "configs/build.yaml",
                f"build.sources[{i}]",
                f"a source of configs/sources.yaml ({', '.join(cfg['sources'])}), got {slug!r}",
            )
    _labels_cover_the_built_sources(cfg)
    for key in ("licences", "provenance"):  # spelled out per source on the card and in Croissant: none left out
        for slug in cfg["build"]["sources"]:
            if slug not in cfg["exports"][key]:
                raise ConfigError(
                    "configs/exports.yaml",
                    f"exports.{key}.{slug}",
                    f"an entry for {slug!r}, a source of configs/build.yaml build.sources (the dataset "
                    f"card and Croissant state every built source's {key})",
                )
    fallback = cfg["release"]["task_names"]
    for tid, t in cfg["tasks"].items():
        _template_covers_its_sources(tid, t)
        if t["task_name"] is None and tid not in fallback:
            raise ConfigError(
                f"configs/tasks/{tid}.yaml",
                "task_name",
                "a public task name (here or in configs/release.yaml task_names)",
            )
        if t["task_name"] is not None and tid in fallback and fallback[tid] != t["task_name"]:
            raise ConfigError(
                "configs/release.yaml",
                f"release.task_names.{tid}",
                f"the task_name of configs/tasks/{tid}.yaml ({t['task_name']!r}); keep one",
            )


def _labels_cover_the_built_sources(cfg: dict) -> None:
    """Every per-source section of configs/labels.yaml has an entry for every source the build reads (a source
    without a rule says so: `method: none`, or `mode: none` in motion and activity)."""
    from pipeline.settings.labels import LabelsFile
    from pipeline.settings.types import BySource

    for section, field in LabelsFile.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BySource)):
            continue
        have = set(cfg["labels"][section]) - (set(model.model_fields) - {"entries"})
        for slug in cfg["build"]["sources"]:
            if slug not in have:
                raise ConfigError(
                    "configs/labels.yaml",
                    f"labels.{section}.{slug}",
                    f"an entry for {slug!r}, a source of configs/build.yaml build.sources (give "
                    f"`method: none` or `mode: none` if it has no {section} rule)",
                )


def _template_covers_its_sources(tid: str, t: dict) -> None:
    """Every source a template lists has a quota, and its per-source maps resolve for it (its slug or `default`)."""
    file = f"configs/tasks/{tid}.yaml"
    for slug in t["quota"]:
        if slug not in t["sources"]:
            raise ConfigError(file, f"quota.{slug}", f"a source listed in `sources` ({', '.join(t['sources'])})")
    needed = ["question", "frames"] + ([] if t["display_labels"] else ["labels"])
    for slug in t["sources"]:
        if slug not in t["quota"]:
            raise ConfigError(file, "quota", f"a quota for every listed source; {slug!r} has none")
        for key in needed:
            value = t[key]
            if isinstance(value, dict) and slug not in value and "default" not in value:
                raise ConfigError(file, key, f"an entry for source {slug!r} or a `default` entry")


def _load_dict(
    config_dir: Path | None = None,
    upstream: dict[str, str] | None = None,
    scale: str | None = None,
    variants: dict[str, str] | None = None,
) -> dict:
    """The validated configs as a plain dict, roots resolved and scale applied (what `Settings` is built from)."""
    cfg = copy.deepcopy(read_settings(config_dir, variants))
    build = cfg["build"]
    if scale:
        if scale not in build["quota_scale"]:
            raise ConfigError(
                "configs/build.yaml",
                "build.scale",
                f"one of {sorted(build['quota_scale'])} (quota_scale keys), got {scale!r}",
            )
        build["scale"] = scale
    for slug, src in cfg["sources"].items():
        # every adapter reads within the build's declared-size bounds (upstream_adapters.get_adapter)
        src["adapter"] = {**src.get("adapter", {}), "input_limits": dict(build["input_limits"])}
        root = (
            (upstream or {}).get(slug)
            or os.environ.get(f"PROCESSBENCH_ROOT_{slug.upper()}")
            or str(src["root"]).replace("{scale}", build["scale"])
        )
        root = Path(root)
        src["root"] = root if root.is_absolute() else (REPO_ROOT / root)
    return cfg


def load_settings(
    config_dir: Path | None = None,
    upstream: dict[str, str] | None = None,
    scale: str | None = None,
    variants: dict[str, str] | None = None,
) -> Settings:
    """The validated configs as one frozen `Settings`. `upstream` maps slug -> root path (overrides sources.yaml and
    the PROCESSBENCH_ROOT_<SLUG> environment variables); `scale` overrides build.scale (demo | release); `variants`
    ({task_id: name}) overrides the templates' `variant` (read_settings)."""
    from pipeline.settings.root import Settings

    return Settings.model_validate(_load_dict(config_dir, upstream, scale, variants))


def path_in_repo(p: str | Path) -> Path:
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


# ------------------------------------------------------------------------------------------- the split's policy


def load_split_policy(
    config_file: Path | None = None, config_dir: Path | None = None, cfg: Settings | None = None
) -> tuple[dict, int]:
    """The split policy (plain values: what the split package computes with) and its seed (split.seed, null =
    build.release_seed), of `cfg` (else the configs of `config_dir`), with `config_file` (YAML shaped like
    configs/split.yaml, with or without the top-level `split:` key; may be partial) merged over the split section and
    validated like it."""
    from pipeline.settings.models import SplitFile

    cfg = cfg if cfg is not None else load_settings(config_dir)
    policy = cfg.split.model_dump()
    if config_file:
        path = Path(config_file)
        data = _read(path)
        over = data["split"] or {} if list(data) == ["split"] else data
        policy = validate_file(SplitFile, _deep_merge(policy, over), path.name, "split")
    seed = policy["seed"]
    return policy, int(cfg.build.release_seed if seed is None else seed)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
