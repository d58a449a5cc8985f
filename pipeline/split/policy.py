"""The split policy: `cfg.split` of the merged config (configs/split.yaml), its seed, and per-source lookups."""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
from pathlib import Path

from pipeline.settings.config import load_split_policy

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

# unit fields an isolation key may name (alone or in a tuple): columns of the IR units table. content_hash (set by
# ingest from a unit's clock and signals) is equal for the same recording stored under two unit ids.
UNIT_KEYS = ("task_id", "operator_id", "scene_id", "config_id", "taxonomy", "content_hash")


def load_policy(config_file: Path | None = None, cfg: Settings | None = None) -> tuple[dict, int]:
    """The policy and seed of the merged config (`cfg`, else configs/), with `config_file` merged over the policy and
    validated like configs/split.yaml (pipeline.settings.config.load_split_policy)."""
    return load_split_policy(config_file, cfg=cfg)


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
