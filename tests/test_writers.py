"""Release writers: schema, rows, deterministic bytes, parquet == jsonl, metadata and baselines (hand-made tables)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from factories import DOCUMENTS, build, make_cfg, make_items, make_units
from pipeline.release import writers
from pipeline.release import schema
from pipeline.steps.tables import STEP_FILE_KEYS

# ---------------------------------------------------------------- schema


EXPECTED_COLUMNS = [
    "item_id",
    "split",
    "source",
    "source_slug",
    "source_task_id",
    "source_unit_type",
    "source_unit_id",
    "task_id",
    "task_name",
    "task_type_legacy",
    "input_type",
    "question",
    "choice_A",
    "choice_B",
    "choice_C",
    "choice_D",
    "choice_E",
    "choice_F",
    "answer",
    "answer_text",
    "num_choices",
    "num_frames",
    "frame_indices_json",
    "display_labels_json",
    "camera",
    "arm_type",
    "visual_ref",
    "source_episode_ref",
    "reconstruction_key_json",
    "task_meta_in_source",
    "task_meta_public",
    "split_version",
    "split_group_id",
    "builder_version",
    "prompt_version",
    "sft_target",
    "licence",
    "render_spec_json",
    "image_hashes_json",
    "eval_level",
    "item_uid",
]


def test_schema_order_and_types():
    assert list(schema.COLUMN_NAMES) == EXPECTED_COLUMNS
    assert schema.RELEASE_SCHEMA.names == EXPECTED_COLUMNS
    types = {f.name: f.type for f in schema.RELEASE_SCHEMA}
    assert types["num_choices"] == pa.int64() and types["num_frames"] == pa.int64()
    assert types["task_meta_in_source"] == pa.bool_() and types["task_meta_public"] == pa.bool_()
    assert all(
        types[c] == pa.string()
        for c in EXPECTED_COLUMNS
        if c not in ("num_choices", "num_frames", "task_meta_in_source", "task_meta_public")
    )
    nullable = {f.name for f in schema.RELEASE_SCHEMA if f.nullable}
    assert nullable == {
        "choice_C",
        "choice_D",
        "choice_E",
        "choice_F",
        "display_labels_json",
        "arm_type",
        "render_spec_json",
        "image_hashes_json",
        "eval_level",
    }
    assert list(schema.polars_schema()) == EXPECTED_COLUMNS
    assert set(schema.DESCRIPTIONS) == set(EXPECTED_COLUMNS) and all(schema.DESCRIPTIONS.values())


def test_reference_strings():
    assert (
        schema.visual_ref("gm100", "episode", "task_00001__episode_000007", "camera_top", [122])
        == "gm100/episode/task_00001__episode_000007/camera_top/frames[000122]"
    )
    assert (
        schema.visual_ref("aist", "recording", "task_004_episode_3", "cam_high", [5, 1234567])
        == "aist/recording/task_004_episode_3/cam_high/frames[000005,1234567]"
    )
    assert schema.source_episode_ref("gm100", "episode", "u") == "gm100/episode/u"
    key = json.loads(schema.reconstruction_key_json("rh20t", "task_0001", "recording", "r1", "cam", [3, 1]))
    assert key == {
        "source": "rh20t",
        "source_task_id": "task_0001",
        "source_unit_type": "recording",
        "source_unit_id": "r1",
        "camera": "cam",
        "frame_indices": [3, 1],
    }


# ---------------------------------------------------------------- release tables


def test_release_tables_rows():
    cfg = make_cfg()
    items = make_items()
    ev, sft = writers.release_tables(items, make_units(), cfg)
    assert ev.height + sft.height == items.height
    assert ev.height == 10 and sft.height == 25
    assert ev["item_id"].to_list() == [f"pb_v2_eval_{n:06d}" for n in range(1, 11)]
    assert sft["item_id"].to_list()[0] == "pb_v2_sft_000001"
    # sort: source order, task number, unit, anchor
    assert ev["source_slug"].to_list() == ["gm100"] * 5 + ["rh20t"] * 5
    assert ev["task_id"].to_list()[:5] == ["T1", "T1", "T2", "T8", "T9"]
    first = ev.row(0, named=True)
    assert first["frame_indices_json"] == "[10]"  # anchor 10 sorts before anchor 40
    assert first["source"] == "GM-100" and first["source_unit_type"] == "episode"
    assert first["source_task_id"] == "task_00001" and first["licence"] == "unknown"
    assert first["visual_ref"] == "gm100/episode/task_00001__episode_000000/camera_top/frames[000010]"
    assert first["source_episode_ref"] == "gm100/episode/task_00001__episode_000000"
    assert json.loads(first["reconstruction_key_json"])["frame_indices"] == [10]
    assert first["task_name"] == "Phase Recognition" and first["task_meta_public"] is False
    assert first["task_meta_in_source"] is False  # episode 0 has no language
    assert first["sft_target"] == f"<ANSWER>{first['answer']}</ANSWER>"
    assert first["choice_E"] is None and first["choice_F"] is None and first["num_frames"] == 1
    assert first["builder_version"] == cfg.release.builder_version
    assert first["eval_level"] is None
    t8 = ev.filter(pl.col("task_id") == "T8").row(0, named=True)
    assert t8["num_choices"] == 6 and t8["choice_F"] is not None and t8["display_labels_json"] == '["X","Y","Z"]'
    assert t8["frame_indices_json"] == "[30,5,17]" and t8["task_type_legacy"] == "T_temporal"
    assert t8["visual_ref"].endswith("/frames[000030,000005,000017]")
    assert t8[f"choice_{t8['answer']}"] == t8["answer_text"] == "YZX"
    t9 = sft.filter(pl.col("task_id") == "T9").row(0, named=True)
    assert t9["task_name"] == "Temporal Priority Prediction" and len(json.loads(t9["image_hashes_json"])) == 1
    assert sft.filter(pl.col("source_slug") == "rh20t")["task_meta_in_source"].all()


def test_release_tables_independent_of_input_order():
    cfg = make_cfg()
    items = make_items()
    a = writers.release_tables(items, make_units(), cfg)
    b = writers.release_tables(items.reverse(), make_units().reverse(), cfg)
    assert a[0].equals(b[0]) and a[1].equals(b[1])


def test_eval_level_is_carried():
    items = make_items().with_columns(eval_level=pl.when(pl.col("split") == "eval").then(pl.lit("L1")))
    ev, sft = writers.release_tables(items, make_units(), make_cfg())
    assert set(ev["eval_level"].to_list()) == {"L1"} and sft["eval_level"].null_count() == sft.height


def test_task_names_one_place():
    cfg = make_cfg().with_values(
        {
            "tasks.T1.task_name": "Phase Recognition",
            "tasks.T2.task_name": None,
            "release.task_names": {"T2": "Contact Detection"},
        }
    )  # T2: the fallback
    assert {t: n for t, n in cfg.task_names().items() if t in ("T1", "T2")} == {
        "T1": "Phase Recognition",
        "T2": "Contact Detection",
    }
    cfg = cfg.with_values({"release.task_names": {"T2": "Contact Detection", "T1": "Phase Classification"}})
    with pytest.raises(ValueError, match="keep one"):
        cfg.task_names()


def test_real_configs_name_every_task():
    import public_release_pins as pins
    from pipeline.settings.config import load_settings

    cfg = load_settings()
    names = cfg.task_names()
    assert list(names) == cfg.task_ids and all(names.values())
    assert {t: names[t] for t in pins.TASK_NAMES} == pins.TASK_NAMES
    assert writers.file_names(cfg) == make_cfg().release.files.model_dump()


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.with_columns(unit_id=pl.lit("nope")), "not in the units table"),
        (lambda d: d.with_columns(answer_text=pl.lit("something else")), "answer_text"),
        (lambda d: d.with_columns(split_group_id=pl.lit("one-group")), "both splits"),
        (lambda d: d.with_columns(source=pl.lit("unknown_src")), "not configured"),
        (lambda d: d.drop("image_hashes_json"), "lacks columns"),
        (lambda d: d.with_columns(answer=pl.lit("F")), "answer"),
    ],
)
def test_release_tables_rejects_contract_violations(mutate, match):
    with pytest.raises(ValueError, match=match):
        writers.release_tables(mutate(make_items()), make_units(), make_cfg())


# ---------------------------------------------------------------- the release folder


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_write_release_layout_and_deterministic_bytes(tmp_path):
    cfg = make_cfg()
    _, _, result = build(tmp_path / "a")
    build(tmp_path / "b")
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b
    # every configured file but the T13 step files (no step items here: a release without the step track)
    assert sorted(a) == sorted(v for k, v in cfg.release.files.model_dump().items() if k not in STEP_FILE_KEYS)
    build(tmp_path / "a")  # rewriting in place changes nothing
    assert _tree(tmp_path / "a") == a
    assert result["eval_items"] == 10 and result["sft_items"] == 25
    assert result["eval_groups"] == 2 and result["sft_groups"] == 5
    assert sorted(result["files"]) == sorted(set(a) - {"checksums.sha256"})


def test_checksums_can_be_left_to_the_caller(tmp_path):
    """The release step writes checksums.sha256 once, at its end: write_release(checksums=False) leaves it out, and
    writing it afterwards gives the release write_release gives on its own."""
    cfg = make_cfg()
    ev, sft = writers.release_tables(make_items(), make_units(), cfg)
    writers.write_release(ev, sft, {"eval_ratio": 0.15}, cfg, tmp_path / "a", DOCUMENTS, checksums=False)
    assert not (tmp_path / "a" / "checksums.sha256").exists()
    writers.write_checksums(tmp_path / "a", cfg)
    build(tmp_path / "b")
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_parquet_and_jsonl_hold_identical_rows(tmp_path):
    ev, sft, _ = build(tmp_path)
    files = make_cfg().release.files.model_dump()
    for split, df in (("eval", ev), ("sft", sft)):
        pq_df = pl.read_parquet(tmp_path / files[f"{split}_parquet"])
        jl_df = pl.read_ndjson(tmp_path / files[f"{split}_jsonl"], schema=schema.polars_schema())
        assert pq_df.equals(df) and jl_df.equals(pq_df)
        first = json.loads((tmp_path / files[f"{split}_jsonl"]).read_text().splitlines()[0])
        assert list(first) == EXPECTED_COLUMNS


def test_checksums_are_sha256sum_compatible(tmp_path):
    build(tmp_path)
    lines = (tmp_path / "checksums.sha256").read_text().splitlines()
    assert [ln.split("  ", 1)[1] for ln in lines] == sorted(ln.split("  ", 1)[1] for ln in lines)
    assert "checksums.sha256" not in (tmp_path / "checksums.sha256").read_text()
    if shutil.which("sha256sum"):
        out = subprocess.run(
            ["sha256sum", "-c", "--strict", "checksums.sha256"], cwd=tmp_path, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_split_summary_and_manifests(tmp_path):
    cfg = make_cfg()
    build(
        tmp_path,
        summary={
            "eval_ratio": 0.15,
            "restarts": 8,
            "sources": {"gm100": {"objective": 0.25, "group_unit": "(task_id, episode_id)"}, "rh20t": {"eval": 5}},
        },
    )
    meta = tmp_path / "metadata"
    s = json.loads((meta / "split_summary.json").read_text())
    assert s["version"] == s["split_version"] == cfg.release.split_version
    assert s["seed"] == 42 and s["eval_ratio"] == 0.15 and s["restarts"] == 8
    assert s["eval_items"] == 10 and s["sft_items"] == 25 and s["total_items"] == 35
    assert s["task_aliases"] == {"T8": "T_temporal", "T9": "T_binary"}
    g = s["sources"]["gm100"]
    assert (g["total"], g["eval"], g["sft"], g["eval_groups"], g["sft_groups"]) == (20, 5, 15, 1, 3)
    assert g["objective"] == 0.25 and g["name"] == "GM-100" and g["task_counts_eval"]["T1"] == 2
    assert g["group_unit"] == "(task_id, episode_id)" and s["sources"]["rh20t"]["group_unit"] == "recording"
    assert s["task_counts_total"] == {"T1": 14, "T2": 7, "T8": 7, "T9": 7}
    assert "split_policy" in s and "created_at" not in s
    m = json.loads((meta / "eval_manifest.json").read_text())
    assert m["visual_inputs_redistributed"] is False and m["reconstruction_required"] is True
    assert m["files"]["parquet"] == cfg.release.files.eval_parquet
    assert m["release_files"] == cfg.release.files.model_dump() and m["hf_split"] == "test"
    assert m["sources"]["rh20t"] == {
        "name": "RH20T",
        "num_items": 5,
        "num_groups": 1,
        "licences": ["CC BY-SA 4.0"],
        "task_counts": {"T1": 2, "T2": 1, "T8": 1, "T9": 1},
    }
    assert m["random_baselines"] == {"T1": 0.25, "T2": 0.5, "T8": 0.1667, "T9": 0.5}
    sm = json.loads((meta / "sft_manifest.json").read_text())
    assert sm["hf_split"] == "train" and sm["licences"]["rh20t"] == ["CC BY-NC 4.0", "CC BY-SA 4.0"]
    assert "majority_baselines" not in sm
    assert (
        meta / "split_groups_eval.txt"
    ).read_text() == "gm100/task_00001__episode_000000\nrh20t/task_0001_user_0001_scene_0001_cfg_0002\n"
    assert len((meta / "split_groups_sft.txt").read_text().splitlines()) == 5
    schema_md = (meta / "schema.md").read_text()
    assert all(f"`{c}`" in schema_md for c in EXPECTED_COLUMNS)
    assert (meta / "reconstruction.md").read_text() == DOCUMENTS["reconstruction"]


@pytest.mark.parametrize(
    "summary, match",
    [
        ({"eval_items": 11}, "eval_items"),
        ({"version": "splits_v1"}, "version"),
        ({"created_at": "2026-01-01T00:00:00"}, "wall-clock"),
        ({"notes": "written from /home/alice/build"}, "leak"),
    ],
)
def test_split_summary_refuses_conflicts_and_machine_content(tmp_path, summary, match):
    with pytest.raises(ValueError, match=match):
        build(tmp_path, summary=summary)


def test_documents_must_match_configuration(tmp_path):
    cfg = make_cfg()
    ev, sft = writers.release_tables(make_items(), make_units(), cfg)
    with pytest.raises(ValueError, match="missing"):
        writers.write_release(ev, sft, {}, cfg, tmp_path, {"prompt_templates": "x"})
    with pytest.raises(ValueError, match="unknown"):
        writers.write_release(ev, sft, {}, cfg, tmp_path, {**DOCUMENTS, "extra": "x"})
    with pytest.raises(ValueError, match="leak"):
        writers.write_release(ev, sft, {}, cfg, tmp_path, {**DOCUMENTS, "reconstruction": "cd C:\\Users\\bob\\data"})


def _table(task_rows):
    """A minimal eval table: (task_id, num_choices, answer) triples."""
    base = make_items().head(1)
    ev, _ = writers.release_tables(base.with_columns(split=pl.lit("eval")), make_units(), make_cfg())
    row = ev.row(0, named=True)
    return pl.DataFrame(
        [{**row, "task_id": t, "num_choices": n, "answer": a, "answer_text": f"label {a}"} for t, n, a in task_rows],
        schema=schema.polars_schema(),
    )


def test_task_distribution_baselines():
    cfg = make_cfg()
    rows = (
        [("T1", 4, a) for a in "AABCDDDA"]
        + [("T2", 2, a) for a in "ABB"]
        + [("T10", 4, "A")]
        + [("T3", 4, "A"), ("T3", 2, "B")]
    )
    ev = _table(rows)
    text = writers.task_distribution_csv(ev, cfg)
    assert text.splitlines() == [
        "task_id,task_name,eval_n,num_choices,random_acc,majority_acc,label_prior_acc,label_prior_answer,"
        "delivered,quota,shortfall_reason",  # the quota columns: empty without the build's quota cells
        "T1,Phase Recognition,8,4,0.2500,0.3750,0.3750,label A,,,",  # the label prior: the most frequent answer text
        "T2,Contact Detection,3,2,0.5000,0.6667,0.6667,label B,,,",
        "T3,Motion Direction Prediction,2,2|4,0.3750,0.5000,0.5000,label A,,,",
        "T10,Current Primitive Recognition,1,4,0.2500,1.0000,1.0000,label A,,,",
    ]
    assert writers.majority_baselines(ev, 4) == {"T1": 0.375, "T2": 0.6667, "T3": 0.5, "T10": 1.0}
    assert writers.random_baselines(ev, 4)["T3"] == 0.375


def test_eval_levels_are_files_of_their_own_and_validated(tmp_path):
    from pipeline.publish.validate import validate_release

    cfg = make_cfg()
    l2_unit = "task_0001_user_0001_scene_0001_cfg_0002"
    items = make_items().with_columns(
        eval_level=pl.when(pl.col("split") != "eval")
        .then(None)
        .when(pl.col("unit_id") == l2_unit)
        .then(pl.lit("L2"))
        .otherwise(pl.lit("L1"))
    )
    ev, sft, _ = build(tmp_path / "rel", cfg, items)
    files, lf = writers.file_names(cfg), writers.level_file_names(cfg, "L2")
    main = pl.read_parquet(tmp_path / "rel" / files["eval_parquet"])
    l2 = pl.read_parquet(tmp_path / "rel" / lf["parquet"])
    assert set(main["eval_level"]) == {"L1"} and set(l2["eval_level"]) == {"L2"}
    assert main.height + l2.height == ev.height and l2.height == ev.filter(pl.col("eval_level") == "L2").height
    m = json.loads((tmp_path / "rel" / lf["manifest"]).read_text())
    assert m["eval_level"] == "L2" and m["num_items"] == l2.height and m["files"]["parquet"] == lf["parquet"]
    s = json.loads((tmp_path / "rel" / files["split_summary"]).read_text())
    assert s["eval_levels"]["L2"]["items"] == l2.height and s["eval_levels"]["L1"]["items"] == main.height
    assert s["eval_items"] == ev.height
    assert validate_release(tmp_path / "rel", cfg) == []
    # plant: the L2 jsonl loses a row (and its checksum is refreshed so only the level check can see it)
    jl = tmp_path / "rel" / lf["jsonl"]
    jl.write_text("".join(jl.read_text().splitlines(keepends=True)[1:]))
    writers.write_checksums(tmp_path / "rel", cfg)
    assert any(lf["jsonl"] in p for p in validate_release(tmp_path / "rel", cfg))
