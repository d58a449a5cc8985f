"""Load the build configuration: every YAML file under configs/, merged into one plain dict.

    cfg = load_config()                    # configs/ of this repository
    cfg["build"]["release_seed"]           # configs/build.yaml
    cfg["sources"]["gm100"]["root"]        # configs/sources.yaml (resolved to an absolute Path at load time)
    cfg["labels"], cfg["split"], cfg["frames"], cfg["release"]   # configs/<name>.yaml
    cfg["tasks"]["T1"]                     # configs/tasks/T1.yaml

Thresholds, quotas, seeds and names live in these files only; code reads them from here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"


def _read(path: Path) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def load_config(config_dir: Path | None = None, upstream: dict[str, str] | None = None,
                scale: str | None = None) -> dict:
    """Merge configs/*.yaml and configs/tasks/*.yaml. `upstream` maps slug -> root path (overrides sources.yaml and the
    PROCESSBENCH_ROOT_<SLUG> environment variables); `scale` overrides build.scale (demo | release)."""
    config_dir = Path(config_dir or CONFIG_DIR)
    cfg: dict = {}
    for path in sorted(config_dir.glob("*.yaml")):
        data = _read(path)
        cfg[path.stem] = data.get(path.stem, data) if isinstance(data, dict) else data
    cfg["tasks"] = {p.stem: _read(p) for p in sorted((config_dir / "tasks").glob("T*.yaml"), key=lambda p: int(p.stem[1:]))}
    build = cfg.setdefault("build", {})
    if scale:
        build["scale"] = scale
    for slug, src in cfg.get("sources", {}).items():
        root = (upstream or {}).get(slug) or os.environ.get(f"PROCESSBENCH_ROOT_{slug.upper()}") or \
            str(src["root"]).replace("{scale}", build.get("scale", "demo"))
        root = Path(root)
        src["root"] = root if root.is_absolute() else (REPO_ROOT / root)
    return cfg


def config_digest(cfg: dict) -> str:
    """A hash of everything in the config that shapes release content (roots excluded: they are machine-specific)."""
    clean = {k: v for k, v in cfg.items() if k != "sources"}
    clean["sources"] = {s: {k: v for k, v in d.items() if k != "root"} for s, d in cfg.get("sources", {}).items()}
    return hashlib.sha256(yaml.safe_dump(clean, sort_keys=True).encode()).hexdigest()[:16]


def path_in_repo(p: str | Path) -> Path:
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p
