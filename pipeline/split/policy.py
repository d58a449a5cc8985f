"""The split policy: `cfg["split"]` of the merged config (configs/split.yaml), its seed, and per-source lookups."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..config import load_config

# unit fields an isolation key may name (alone or in a tuple): columns of the IR units table
UNIT_KEYS = ("task_id", "operator_id", "scene_id", "config_id", "taxonomy")


def policy_and_seed(cfg: dict) -> tuple[dict, int]:
    """The split policy and its seed from the merged config: `split.seed`, else `build.release_seed`."""
    policy = cfg["split"]
    seed = policy["seed"]
    return policy, int(cfg["build"]["release_seed"] if seed is None else seed)


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_policy(config_file: Path | None = None, cfg: dict | None = None) -> tuple[dict, int]:
    """The policy and seed of the merged config (`cfg`, else load_config()), with `config_file` (YAML shaped like
    configs/split.yaml, with or without the top-level `split:` key; may be partial) merged over the policy."""
    cfg = dict(cfg if cfg is not None else load_config())
    if config_file:
        data = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{Path(config_file).name}: expected a mapping of split settings")
        cfg["split"] = _deep_merge(cfg["split"], data.get("split", data))
    return policy_and_seed(cfg)


def n_eval_groups(n_groups: int, eval_ratio: float) -> int:
    """max(1, round(n × ratio)) with Python's (half-even) round, exactly the public rule; 0 for an empty pool."""
    if n_groups <= 0:
        return 0
    return min(n_groups, max(1, round(n_groups * float(eval_ratio))))


def source_policy(policy: dict, source: str) -> dict:
    """The source's entry of `policy["sources"]`, or `policy["default_source"]` for any other slug."""
    return dict(policy["sources"].get(source) or policy["default_source"])


def merge_keys(sp: dict) -> list[tuple[str, ...]]:
    """A source's isolation keys as tuples of unit fields: `scene_id` → ("scene_id",), [task_id, scene_id] → a
    composite key (units merge when they share every field of it)."""
    out = []
    for k in sp["merge_keys"]:
        key = (k,) if isinstance(k, str) else tuple(k)
        bad = [f for f in key if f not in UNIT_KEYS]
        if bad or not key:
            raise ValueError(f"split.yaml merge_keys: {k!r} names no unit field ({', '.join(UNIT_KEYS)})")
        out.append(key)
    return out


def key_name(key: tuple[str, ...]) -> str:
    return "+".join(key)


def family_sort_key(fam: str) -> tuple:
    m = re.fullmatch(r"T(\d+)", str(fam))
    return (0, int(m.group(1)), "") if m else (1, 0, str(fam))
