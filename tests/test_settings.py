"""Typed settings: every configs/ file is validated at load; a wrong key or type names the file, the key path and what
was expected; the dict handed to the code keeps every YAML value and fills the declared defaults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import public_release_pins as pins
from pipeline.settings.config import CONFIG_DIR, load_settings, load_split_policy, read_settings, read_task
from pipeline.labels.driver import source_spec
from pipeline.settings.errors import ConfigError


@pytest.fixture
def cfg_dir(tmp_path) -> Path:
    d = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, d)
    return d


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _error(cfg_dir) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_dir)
    return err.value


def test_typo_in_labels_names_file_key_and_the_key_meant(cfg_dir):
    _replace(cfg_dir / "labels.yaml", "head_ratio: 0.10", "head_ratoi: 0.10")
    e = _error(cfg_dir)
    assert e.file == "configs/labels.yaml"
    assert e.key == "labels.contact.gm100.head_ratoi"
    assert "did you mean 'head_ratio'" in e.expected and "tail_ratio" in e.expected


def test_wrong_type_in_a_task_template(cfg_dir):
    _replace(cfg_dir / "tasks" / "T3.yaml", "num_choices: 4", "num_choices: four")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/tasks/T3.yaml", "num_choices")
    assert "valid integer" in e.expected and "'four'" in e.expected
    assert str(e).startswith("configs/tasks/T3.yaml: num_choices: expected")


def test_unknown_top_level_file(cfg_dir):
    (cfg_dir / "publish.yaml").write_text("publish: {formats: [croissant]}\n")
    e = _error(cfg_dir)
    assert e.file == "configs/publish.yaml" and "known config file" in e.expected and "build.yaml" in e.expected


def test_unknown_key_in_a_per_source_window(cfg_dir):
    _replace(cfg_dir / "tasks" / "T3.yaml", "gm100: {offsets: [-10, -5, 0, 5]}", "gm100: {offset: [-10, -5, 0, 5]}")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/tasks/T3.yaml", "frames.gm100.offset")
    assert "did you mean 'offsets'" in e.expected


def test_a_key_of_another_method_is_an_error(cfg_dir):
    # low_velocity belongs to the contact_speed phase rule, not to REASSEMBLE's low_level_map
    _replace(cfg_dir / "labels.yaml", "no_action: pre-approach", "no_action: pre-approach\n      low_velocity: 0.3")
    e = _error(cfg_dir)
    assert e.key == "labels.phase.reassemble.low_velocity"


def test_unknown_method_lists_the_methods(cfg_dir):
    _replace(cfg_dir / "labels.yaml", "method: effort_drop", "method: effort_dropp")
    e = _error(cfg_dir)
    assert e.key == "labels.contact.gm100" and "'force_hysteresis'" in e.expected


def test_misspelt_shared_key_of_a_per_source_section(cfg_dir):
    _replace(cfg_dir / "labels.yaml", "    window: [-6, -3, 0, 3, 6]", "    windw: [-6, -3, 0, 3, 6]")
    e = _error(cfg_dir)
    assert e.key == "labels.motion.windw" and "did you mean 'window'" in e.expected


def test_a_union_reports_the_member_that_got_furthest(cfg_dir):
    _replace(cfg_dir / "tasks" / "T1.yaml", "min_gap: {gm100: 10,", "min_gap: {gm100: ten,")
    e = _error(cfg_dir)
    assert e.key == "min_gap.gm100" and "got 'ten'" in e.expected


def test_misspelt_source_slug(cfg_dir):
    _replace(cfg_dir / "labels.yaml", "    gm100: {smooth: none, span: 1}", "    gm10: {smooth: none, span: 1}")
    e = _error(cfg_dir)
    assert e.key == "labels.speed.gm10" and "a registered source slug" in e.expected and "got 'gm10'" in e.expected


def test_step_priority_names_a_registered_source(cfg_dir):
    _replace(cfg_dir / "build.yaml", "priority: {gm100: 1}", "priority: {gm10: 1}")
    e = _error(cfg_dir)
    assert e.key == "build.executor.priority.gm10" and "got 'gm10'" in e.expected


def test_native_threads_is_a_positive_count_or_null(cfg_dir):
    _replace(cfg_dir / "build.yaml", "native_threads: 1", "native_threads: 0")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/build.yaml", "build.executor.native_threads")
    assert "greater than or equal to 1" in e.expected


def test_the_priority_source_s_steps_carry_dagster_s_priority_tag():
    """configs/build.yaml gives GM-100 (the longest chain) priority: each of its steps is tagged, the others not."""
    from assets.definitions import ASSETS, CFG

    assert CFG.build.executor.priority == {"gm100": 1}
    tags = {a.op.name: a.op.tags for a in ASSETS}
    assert {n for n, t in tags.items() if t.get("dagster/priority") == "1"} == {
        "ingest_gm100",
        "labels_gm100",
        "candidates_gm100",
        "items_gm100",
    }
    assert all("dagster/priority" not in t for n, t in tags.items() if not n.endswith("_gm100"))


def test_a_labels_section_without_a_built_source_is_refused_at_load(cfg_dir):
    # the whole RH20T entry of the activity section goes: refused at load, not when the labels stage reaches it
    _replace(cfg_dir / "labels.yaml", "    rh20t: {mode: none}                   # single-arm: no coordination\n", "")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/labels.yaml", "labels.activity.rh20t")
    assert "build.sources" in e.expected and "none" in e.expected


@pytest.mark.parametrize("key", ["licences", "provenance"])
def test_a_built_source_without_its_licence_or_provenance_is_refused_at_load(cfg_dir, key):
    """The card and Croissant state each built source's terms and origin: a source left out is a load error naming
    the source and the missing key, not a source silently missing from the card."""
    text = (cfg_dir / "exports.yaml").read_text()
    entry = next(
        line
        for line in text.splitlines(keepends=True)
        if line.startswith("    rh20t: ") and text.index(line) > text.index(f"  {key}:")
    )
    (cfg_dir / "exports.yaml").write_text(text.replace(entry, "", 1))
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/exports.yaml", f"exports.{key}.rh20t")
    assert "'rh20t'" in e.expected and "build.sources" in e.expected


def test_wrong_enum_value_and_out_of_range_number(cfg_dir):
    _replace(cfg_dir / "frames.yaml", "mp_context: forkserver", "mp_context: threads")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/frames.yaml", "frames.mp_context") and "'spawn'" in e.expected
    _replace(cfg_dir / "frames.yaml", "mp_context: threads", "mp_context: forkserver")
    _replace(cfg_dir / "frames.yaml", "png_compression: 1", "png_compression: 12")
    assert _error(cfg_dir).key == "frames.cache.png_compression"


def test_cross_file_checks(cfg_dir):
    _replace(cfg_dir / "build.yaml", "sources: [gm100, rh20t, reassemble, aist]", "sources: [gm100, rh20t]")
    load_settings(cfg_dir)  # a subset is fine
    _replace(cfg_dir / "sources.yaml", "  aist:\n", "  aist_off:\n")
    e = _error(cfg_dir)
    assert e.file == "configs/sources.yaml" and "got 'aist_off'" in e.expected
    _replace(cfg_dir / "sources.yaml", "  aist_off:\n", "  aist:\n")
    _replace(cfg_dir / "build.yaml", "sources: [gm100, rh20t]", "sources: [gm100, rh20t, aist]")
    text = (cfg_dir / "sources.yaml").read_text()
    (cfg_dir / "sources.yaml").write_text(text[: text.index("  aist:\n")])  # aist built but not configured
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/build.yaml", "build.sources[2]") and "configs/sources.yaml" in e.expected
    (cfg_dir / "sources.yaml").write_text(text)
    _replace(cfg_dir / "tasks" / "T2.yaml", "task_id: T2", "task_id: T3")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/tasks/T2.yaml", "task_id")


def test_task_name_in_two_places_must_agree(cfg_dir):
    _replace(cfg_dir / "release.yaml", "  documents:", "  task_names: {T1: Phase Classification}\n  documents:")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/release.yaml", "release.task_names.T1")


def test_quota_for_a_source_the_template_does_not_list(cfg_dir):
    _replace(cfg_dir / "tasks" / "T10.yaml", "quota: {reassemble: 2438}", "quota: {reassemble: 2438, gm100: 10}")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/tasks/T10.yaml", "quota.gm100") and "reassemble" in e.expected


def test_a_listed_source_needs_its_template_entries(cfg_dir):
    _replace(cfg_dir / "tasks" / "T3.yaml", "  aist: {offsets: [-30, -15, 0, 15]}\n", "")
    e = _error(cfg_dir)
    assert (e.file, e.key) == ("configs/tasks/T3.yaml", "frames") and "'aist'" in e.expected


def _leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, d


def test_every_yaml_value_reaches_the_code_unchanged():
    cfg = read_settings()
    for p in sorted(CONFIG_DIR.glob("*.yaml")):
        raw = yaml.safe_load(p.read_text())[p.stem]
        for path, value in _leaves(raw):
            got = cfg[p.stem]
            for k in path:
                got = got[k]
            assert got == value and type(got) is type(value), (p.name, path)
    for p in sorted((CONFIG_DIR / "tasks").glob("*.yaml")):
        raw = yaml.safe_load(p.read_text())
        for name, over in (raw.get("variants") or {}).items():  # each variant's values reach the code too
            t = read_task(p.stem, variant=name)
            for path, value in _leaves(over):
                got = t
                for k in path:
                    got = got[k]
                assert got == value and type(got) is type(value), (p.name, name, path)
        for path, value in _leaves({k: v for k, v in raw.items() if k != "variants"}):
            got = (cfg["step_tasks"] if raw.get("track") == "steps" else cfg["tasks"])[p.stem]
            for k in path:
                got = got[k]
            assert got == value and type(got) is type(value), (p.name, path)


def test_defaults_are_filled_for_omitted_keys(cfg_dir):
    _replace(cfg_dir / "frames.yaml", "  in_flight_per_worker: 2", "")
    _replace(cfg_dir / "tasks" / "T1.yaml", "balance_labels: true", "")
    cfg = load_settings(cfg_dir)
    assert cfg.frames.in_flight_per_worker == 2
    assert cfg.tasks["T1"].balance_labels is False
    assert cfg.tasks["T10"].distractors.exclude_current is True
    assert "centers" not in cfg.tasks["T1"].frames["default"].model_dump()  # a window keeps exactly its keys


def test_shared_readers():
    cfg = load_settings()
    ids = cfg.task_ids  # every multiple-choice template of configs/tasks/, in task order (T2 before T10)
    assert sorted(ids + list(cfg.step_tasks)) == sorted(p.stem for p in (CONFIG_DIR / "tasks").glob("T*.yaml"))
    assert list(cfg.step_tasks) == ["T13"]  # the step track (track: steps) is not a multiple-choice family
    assert [int(t[1:]) for t in ids] == sorted(int(t[1:]) for t in ids)
    assert ids[: len(pins.TASK_NAMES)] == list(pins.TASK_NAMES)
    assert cfg.task_names()["T7"] == "Operation Outcome Prediction"
    # a per-source value resolves by its declared type: the source's entry, else `default`; a plain value is itself
    t1 = cfg.with_values({"tasks.T1.min_gap": {"gm100": 1, "default": 2}, "tasks.T1.balance_labels": True}).tasks["T1"]
    assert (t1.for_source("gm100").min_gap, t1.for_source("aist").min_gap) == (1, 2)
    assert t1.for_source("gm100").balance_labels is True and t1.balance_labels is True
    assert t1.for_source("gm100").frames == t1.frames.get("gm100", t1.frames.get("default"))
    assert cfg.labels.speed.for_source("rh20t").model_dump() == {"smooth": "ema", "span": 9}
    assert cfg.labels.activity.for_source("rh20t").mode == "none"
    assert source_spec(cfg.labels.model_dump(), "speed", "rh20t") == {"smooth": "ema", "span": 9}
    with pytest.raises(KeyError, match=r"labels\.activity\.rh20t is missing"):
        source_spec({"activity": {"gm100": {"mode": "none"}}}, "activity", "rh20t")
    assert cfg.split_seed == cfg.build.release_seed


def test_load_split_policy_merges_and_validates_an_override(tmp_path):
    policy, seed = load_split_policy()
    assert seed == 42 and policy["rule"] == "ours"
    over = tmp_path / "pol.yaml"
    over.write_text("split:\n  seed: 5\n  public_rule: {restarts: 2}\n")
    policy, seed = load_split_policy(over)
    assert seed == 5 and policy["public_rule"] == {"seed": 42, "restarts": 2, "swap_passes": 4, "swap_candidates": 24}
    over.write_text("eval_ratio: 0.2\nrulez: public\n")
    with pytest.raises(ConfigError) as err:
        load_split_policy(over)
    assert (err.value.file, err.value.key) == ("pol.yaml", "split.rulez")


def test_the_step_track_template_is_typed_and_resolves_per_source():
    """configs/tasks/T13.yaml (`track: steps`) is a StepTaskFile in `cfg.step_tasks`: its per-source keys resolve like
    a family's, and a changed copy is validated like a loaded one."""
    from pydantic import ValidationError

    from pipeline.settings.steps import StepTaskFile

    cfg = load_settings()
    t13 = cfg.step_tasks["T13"]
    assert isinstance(t13, StepTaskFile) and "T13" not in cfg.tasks
    assert t13.for_source("reassemble").step_kinds == ["primitive", "action_outcome"]
    assert t13.for_source("gm100").goal == t13.goal["gm100"]
    one = cfg.with_values({"step_tasks.T13.goal": "One goal."}).step_tasks["T13"]
    assert one.for_source("aist").goal == "One goal."
    with pytest.raises(ValidationError):
        cfg.with_values({"step_tasks.T13.cap_per_unit": 0})
    for shift in (0, 1.5):  # windows a share of the longest window apart: in (0, 1]
        with pytest.raises(ValidationError):
            cfg.with_values({"step_tasks.T13.window_shift": shift})
