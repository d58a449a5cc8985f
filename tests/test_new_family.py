"""A 13th task family is one YAML template and one registry line (docs/extending.md): a release builds with it, and
no other test needs an edit (tests that enumerate families read them from the configs; the public release's twelve
are pinned in tests/public_release_pins.py)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import polars as pl
import pytest
import yaml

from factories import build_demo
from pipeline import families
from pipeline.settings.config import CONFIG_DIR, load_settings
from pipeline.items.selection import quotas
from pipeline.publish.validate import validate_release

NEW = "T14"  # T13 is the step track (configs/tasks/T13.yaml); a 14th family here


def _thirteenth_family(configs) -> dict:
    """configs/tasks/T14.yaml (T13 is the step track): AIST's arm motion asked as "moving or standing still", made by T6's generator (a new
    family needs a generator of its own only when no existing one makes its items)."""
    t = yaml.safe_load((CONFIG_DIR / "tasks" / "T6.yaml").read_text())
    t.update(
        task_id=NEW,
        task_name="Arm Stillness Recognition",
        legacy_alias=NEW,
        sources=["aist"],
        quota={"aist": 400},
        question={"default": "Over these time-ordered frames, is the {arm} robot arm moving or standing still?"},
    )
    (configs / "tasks" / f"{NEW}.yaml").write_text(yaml.safe_dump(t, sort_keys=False))
    return t


@pytest.mark.slow
def test_a_thirteenth_family_builds_a_release(demo_samples, tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    template = _thirteenth_family(configs)
    cfg = load_settings(configs)
    assert cfg.task_ids[-2:] == ["T12", NEW]
    # without its registry line the family cannot make candidates, and says which family lacks a generator
    with pytest.raises(KeyError, match=NEW):
        families.family_candidates(NEW, "aist", SimpleNamespace(cfg=cfg))
    monkeypatch.setitem(families.GENERATORS, NEW, families.GENERATORS["T6"])  # the registry line

    release = build_demo(demo_samples, tmp_path / "build", config_dir=str(configs), sources=["aist"])
    built = load_settings(configs).with_values({"build.sources": ["aist"]})  # what the build's settings chose
    assert validate_release(release, built) == []  # (validated against the configs it was built with)
    rows = pl.concat(
        [pl.read_parquet(f) for f in sorted((release / "splits").glob("*.parquet")) if "_steps_" not in f.name]
    )  # sft, eval levels (not the T13 step files)
    new = rows.filter(pl.col("task_id") == NEW)
    shortfall = (tmp_path / "build" / "work" / "items" / "aist_shortfall.json").read_text()
    assert new.height == quotas(built, "aist")[NEW] == 8, (new.height, shortfall, rows["task_id"].value_counts())
    assert set(new["task_name"]) == {template["task_name"]}
    assert new["question"].str.starts_with("Over these time-ordered frames, is the").all()
    assert set(rows["task_id"]) == {t for t in cfg.task_ids if "aist" in cfg.tasks[t].sources}
    assert cfg.task_names()[NEW] == template["task_name"]
    assert NEW in (release / "metadata" / "prompt_templates.md").read_text()
