"""Issue 40: why a candidate pool is small. Each family generator counts, per rule it applies, what the rule looked at
and what it left out (pipeline/families/common.py `LeftOut`); the candidates step keeps the figures with each family's
part of the pool, and a quota shortfall's reason words them (pipeline/items/shortfall.py). Hand-made inputs: T3's
calibrated-direction rule here, T7's pairing in tests/test_family_rules.py; the demo build's cells in
tests/test_release_quotas.py."""

from __future__ import annotations

import json

import polars as pl

from factories import synthetic_ir
from pipeline import stages
from pipeline.core import work_tables
from pipeline.core.io import write_parquet
from pipeline.families import Context, enabled_families, family_part
from pipeline.items import selection as items_mod
from pipeline.items.shortfall import rules_reason, shortfall_reason
from pipeline.labels import compute_labels
from pipeline.settings.config import load_settings

CFG = load_settings()


def _aist_t3(cfg):
    ir = synthetic_ir("aist", n_units=4, n_frames=1200)
    labels = compute_labels("aist", ir, CFG)  # the label tables of the configured mapping
    return ir, labels, *family_part("T3", "aist", Context("aist", ir, labels, cfg))


def test_t3_counts_the_arms_the_calibrated_direction_rule_leaves_out():
    ir, labels, pool, figures = _aist_t3(CFG)
    rule = next(r for r in figures if r["name"] == "calibrated_direction")
    # counted here from the configuration itself: an arm whose mapping names fewer directions than the options
    mapping = CFG.labels.direction.for_source("aist").mapping
    camera = dict(ir["units"].select("unit_id", "camera").iter_rows())
    arms = labels["arms"].select("unit_id", "arm").unique().rows()
    short = [(u, a) for u, a in arms if len((mapping.get(camera[u]) or {}).get(a) or {}) < 4]
    assert len(arms) == 8 and len(short) == 4  # AIST's left arm: no `left`
    assert rule == {
        "name": "calibrated_direction",
        "setting": "labels.direction.aist.mapping",
        "what": "arms",
        "why": "had a calibrated mapping naming fewer than 4 directions, so are not asked about",
        "considered": 8,
        "excluded": 4,
    }
    asked = {json.loads(m)["arm"] for m in pool["label_meta_json"]}
    assert asked == {"right"}
    quota = pool.height + 50
    q = items_mod.Quotas({"T3": quota}, {"T3": {"min_gap": 0, "balance_labels": True, "equal_per_unit": False}})
    (rec,) = items_mod.shortfall(pool, q, source="aist", pool=pool, unit_word="recording", left_out={"T3": figures})
    assert rec["left_out"] == figures
    cap = next(r for r in figures if r["name"] == "cap_per_label")
    labels_said = ", ".join(f"{k} {v}" for k, v in sorted(pool.group_by("answer_text").len().iter_rows()))
    assert rec["reason"] == (
        f"its candidate pool holds only {pool.height} items ({labels_said}), all of them taken: of "
        f"{cap['considered']} anchors, {cap['excluded']} {cap['why']} (cap_per_label); of 8 arms, 4 had a calibrated "
        "mapping naming fewer than 4 directions, so are not asked about (calibrated_direction)"
    )

    # planted: a left arm calibrated in all four directions is asked about, and the rule leaves nothing out
    left = {"left": {"axis": "pos_y", "sign": 1}, **mapping["cam_high"]["left"]}
    wide = CFG.with_values({"labels.direction.aist.mapping.cam_high.left": left})
    _, _, pool2, figures2 = _aist_t3(wide)
    assert next(r for r in figures2 if r["name"] == "calibrated_direction")["excluded"] == 0
    assert {json.loads(m)["arm"] for m in pool2["label_meta_json"]} == {"left", "right"}
    assert "calibrated_direction" not in rules_reason(figures2)


def test_the_reason_names_the_rules_that_left_out_the_most():
    fig = lambda name, considered, excluded, **kw: {
        "name": name,
        "setting": f"tasks.T9.{name}",
        "what": kw.pop("what", "sets of 2 frames"),
        "why": kw.pop("why", f"failed {name}"),
        "considered": considered,
        "excluded": excluded,
        **kw,
    }
    figures = [
        fig("distractors", 500, 0, what="candidates"),
        fig("min_sep_sec", 1000, 100),  # 10 %
        fig("state_change", 900, 450, excluded_labels={"X": 300, "Y": 150}),  # 50 %
        fig("require_motion_between", 450, 0),
        fig("cap_per_unit", 450, 300),  # 67 %
        fig("exclude_cameras", 10, 2, what="recordings"),  # 20 %
    ]
    # the three largest shares, in the generator's order; a rule that left nothing out is not named
    assert rules_reason(figures) == (
        "of 900 sets of 2 frames, 450 (X 300, Y 150) failed state_change (state_change); of 450 sets of 2 frames, "
        "300 failed cap_per_unit (cap_per_unit); of 10 recordings, 2 failed exclude_cameras (exclude_cameras)"
    )
    assert rules_reason(figures, shown=1) == "of 450 sets of 2 frames, 300 failed cap_per_unit (cap_per_unit)"
    assert rules_reason(figures[:1]) == "" and rules_reason(None) == "" and rules_reason([{"excluded": "x"}]) == ""
    rec = {"quota": 50, "selected": 40, "pool": 90, "near_selected": 50, "min_gap": 20, "pool_labels": {"X": 90}}
    assert shortfall_reason({**rec, "left_out": figures[:2]}, "recording") == (
        "of its 90 candidates (X 90), 40 were taken and 50 lie within 20 frames of an item chosen from the same "
        "recording (min_gap); before selection, of 1,000 sets of 2 frames, 100 failed min_sep_sec (min_sep_sec)"
    )
    assert shortfall_reason(rec, "recording") == shortfall_reason({**rec, "left_out": figures[:1]}, "recording")


def _work(tmp_path, slug: str = "aist"):
    """A work folder holding a hand-made source's IR and label tables: what the candidates step reads."""
    ir = synthetic_ir(slug, n_units=4, n_frames=1200)
    cfg = load_settings(scale="demo").with_values({"build.work_dir": str(tmp_path / "work")})
    labels = compute_labels(slug, ir, cfg)
    for name, df in ir.items():
        write_parquet(tmp_path / "work" / "ir" / slug / f"{name}.parquet", df)
    for name, df in labels.items():
        write_parquet(tmp_path / "work" / "labels" / slug / f"{name}.parquet", df)
    return cfg, Context(slug, ir, labels, cfg)


def test_the_candidates_step_keeps_each_family_s_figures_with_its_part(tmp_path):
    slug = "aist"
    cfg, ctx = _work(tmp_path, slug)
    first = stages.run_candidates(cfg, slug)
    families = enabled_families(cfg, slug)
    assert first["families_generated"] == families
    pool_file = tmp_path / "work" / "candidates" / f"{slug}.parquet"
    figures = stages.left_out(pool_file)
    assert figures == {t: family_part(t, slug, ctx)[1] for t in families}  # what a generation gives
    assert any(r["name"] == "calibrated_direction" and r["excluded"] for r in figures["T3"])
    assert first["left_out"]["T3"] == [
        f"{r['name']}: {r['excluded']:,} of {r['considered']:,} {r['what']}" for r in figures["T3"] if r["excluded"]
    ]
    # nothing changed: every part read back with its figures, the same pool bytes
    pool_bytes = pool_file.read_bytes()
    assert stages.run_candidates(cfg, slug)["families_generated"] == []
    assert pool_file.read_bytes() == pool_bytes and stages.left_out(pool_file) == figures

    # planted: a part whose footer lost its figures (under a record that matches its bytes) is generated again
    (t3,) = (tmp_path / "work" / "candidates" / slug).glob("T3.*.parquet")
    work_tables.write_checked(t3, pl.read_parquet(t3))
    assert stages.left_out(t3) is None
    assert stages.run_candidates(cfg, slug)["families_generated"] == ["T3"]
    assert stages.left_out(t3) == figures["T3"] and pool_file.read_bytes() == pool_bytes
    # figures under a record that holds them are taken as they are; edited past the record, generated again
    work_tables.write_checked(t3, pl.read_parquet(t3), {stages.LEFT_OUT: json.dumps([])})
    assert stages.run_candidates(cfg, slug)["families_generated"] == []
    assert stages.left_out(pool_file)["T3"] == []
    record = json.loads(work_tables.check_path(t3).read_text())
    write_parquet(t3, pl.read_parquet(t3), {stages.LEFT_OUT: json.dumps(figures["T3"])})  # bytes off the record
    assert work_tables.check(t3, record) is not None
    assert stages.run_candidates(cfg, slug)["families_generated"] == ["T3"]
    assert stages.left_out(pool_file) == figures and pool_file.read_bytes() == pool_bytes

    # a rule's setting changed: the family's key changes, its part and figures are made again
    tight = {"tasks.T3.candidates.cap_per_label.aist": 1, "tasks.T3.candidates.pool_factor.default": 1}
    assert stages.run_candidates(cfg.with_values(tight), slug)["families_generated"] == ["T3"]
    capped = next(r for r in stages.left_out(pool_file)["T3"] if r["name"] == "cap_per_label")
    assert capped["excluded"] > next(r for r in figures["T3"] if r["name"] == "cap_per_label")["excluded"]

    # the source's unit word is in the figures' words: a part made under another one is made again
    assert (
        stages.run_candidates(cfg.with_values({f"sources.{slug}.unit_type": "episode"}), slug)["families_generated"]
        == families
    )
    assert "per episode and label" in json.dumps(stages.left_out(pool_file))
