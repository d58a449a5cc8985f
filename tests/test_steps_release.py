"""The T13 step files of the demo release: present for every level and SFT, rows keep the contract, no split group on
both sides within the step track or across the two tracks, the exports carry them; and the validator finds a group
planted on the other side of the multiple-choice split."""

from __future__ import annotations

import json
import shutil

import polars as pl

from pipeline.settings.config import load_settings
from pipeline.steps.items import STEP_ERROR_KINDS
from pipeline.steps.rows import row_problems
from pipeline.steps.write import step_problems, step_tables
from pipeline.publish.validate import validate_release


def _mcq_sides(release) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"eval": set(), "sft": set()}
    for f in sorted((release / "splits").glob("*.parquet")):
        if "_steps_" not in f.name:
            df = pl.read_parquet(f, columns=["split", "split_group_id"])
            for split, g in df.unique().iter_rows():
                out[split].add(g)
    return out


def test_step_files_keep_the_contract_and_the_isolation(demo_release):
    cfg = load_settings(scale="demo")
    tables = step_tables(demo_release, cfg)
    files = cfg.release.files.model_dump()
    assert files["steps_eval_parquet"] in tables and files["steps_sft_parquet"] in tables
    levels = json.loads((demo_release / files["split_summary"]).read_text()).get("eval_levels") or {}
    rows = pl.concat(list(tables.values()))
    held = set(rows.filter(pl.col("split") == "eval")["eval_level"])
    assert held <= set(levels) | {"L1"}
    for lv in held:  # a step file for every level holding step items (a level of other sources' units has none)
        assert any(lv in rel for rel in tables) or lv == "L1", (lv, sorted(tables))
    built = set(cfg.build.sources) & set(cfg.step_tasks["T13"].sources)
    assert rows.height and set(rows["source_slug"]) == built
    for r in rows.iter_rows(named=True):
        assert row_problems(r) == []
        assert all(k is None or k in STEP_ERROR_KINDS for k in json.loads(r["step_error_kinds_json"]))
    steps = {s: set(rows.filter(pl.col("split") == s)["split_group_id"]) for s in ("eval", "sft")}
    mcq = _mcq_sides(demo_release)
    assert not steps["eval"] & steps["sft"]
    assert not steps["eval"] & mcq["sft"] and not steps["sft"] & mcq["eval"]  # one side for both tracks
    assert step_problems(demo_release, cfg, mcq) == []
    vpb = demo_release / cfg.exports.files.visualprocessbench_eval
    first = json.loads(vpb.read_text().splitlines()[0])
    assert set(first) == {"id", "item_uid", "image", "question", "answer", "response", "policy_model", "data_source"}
    assert first["image"][0].startswith("images/") and set(first["response"]) == {"steps", "process_correctness"}


def test_a_group_moved_across_the_tracks_is_found(demo_release, tmp_path):
    cfg = load_settings(scale="demo")
    release = tmp_path / "release"
    shutil.copytree(demo_release, release)
    rel = cfg.release.files.steps_eval_parquet
    df = pl.read_parquet(release / rel)
    sft_group = sorted(_mcq_sides(release)["sft"])[0]
    df.with_columns(
        pl.when(pl.int_range(pl.len()) == 0)
        .then(pl.lit(sft_group))
        .otherwise(pl.col("split_group_id"))
        .alias("split_group_id")
    ).write_parquet(release / rel)
    problems = validate_release(release, cfg)
    assert any(sft_group in p and "multiple-choice" in p for p in problems), problems


def test_the_card_says_what_each_source_s_wrong_steps_are():
    from pipeline.exports.steps import STEP_RECONSTRUCTION_CONFIG, wrong_step_lines

    def part(rows):
        return ("x.parquet", pl.DataFrame(rows, schema=["source_slug", "step_error_kinds_json"], orient="row"))

    configs = {
        STEP_RECONSTRUCTION_CONFIG: {
            "L1": part([("rh20t", '[null,"swapped_frames","natural_outcome"]'), ("gm100", "[null,null]")]),
            "train": part([("rh20t", '["swapped_frames",null]'), ("gm100", '["contact_flipped"]')]),
        }
    }
    assert wrong_step_lines(configs) == [
        "- gm100: 1 wrong steps: contact_flipped 1",
        "- rh20t: 3 wrong steps: natural_outcome 1, swapped_frames 2",
    ]
    assert wrong_step_lines({}) == []


def test_sources_drafted_side_by_side_give_what_one_after_another_gives(demo_release):
    """build.executor.source_workers: the step track's sources drafted in worker processes (2) give the drafts and
    figures drafting them in turn in this process (1) gives, in the configured order of the sources."""
    from assets.settings import BuildSettings
    from pipeline.settings.paths import work_dir
    from pipeline.steps.stage import all_drafts, group_sides

    cfg = BuildSettings(
        scale="demo", work_dir=str(demo_release.parent / "work"), release_dir=str(demo_release)
    ).config()
    wd = work_dir(cfg)
    sides = group_sides(
        pl.read_parquet(wd / "split" / "items.parquet"), pl.read_parquet(wd / "split" / "groups.parquet")
    )
    slugs = [s for s in cfg.build.sources if s in cfg.step_tasks["T13"].sources]

    def drafted(n: int) -> dict:
        executor = cfg.build.executor.model_copy(update={"source_workers": n})
        return all_drafts(
            cfg.model_copy(update={"build": cfg.build.model_copy(update={"executor": executor})}), "T13", slugs, sides
        )

    one, two = drafted(1), drafted(2)
    assert list(two) == slugs and any(d for d, _ in one.values())
    assert json.dumps(one, sort_keys=True, default=str) == json.dumps(two, sort_keys=True, default=str)
