"""The release rows built column-wise (pipeline/release/rows.py): the bytes the per-row build gave, and every contract
rule refusing a planted defect even though only the rows a polars filter flags are checked one by one."""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest

from factories import fake_hash, make_cfg, make_items, make_units
from pipeline.release import writers
from pipeline.release import schema
from pipeline.core import io
from pipeline.release.identity import mcq_uid


# ---------------------------------------------------------------- bytes


def _tricky() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two items whose cells hold quotes, backslashes, control characters, DEL, U+2028, astral characters, floats
    in a render spec, nulls, a blank-only task language and frame indices past six digits."""
    uid = 'task_00001__épisode "7"\\x'
    units = pl.DataFrame(
        [
            {
                "source": "gm100",
                "unit_id": uid,
                "unit_type": "episode",
                "task_id": "task_0000é",
                "licence": "CC BY 4.0 — ✓",
                "language": " \u3000",
            },
            {
                "source": "rh20t",
                "unit_id": "r\u2028",
                "unit_type": "recording",
                "task_id": "task_0001",
                "licence": "MIT",
                "language": "push\tthe block",
            },
        ]
    )
    spec = io.compact_json(
        {
            "frame_indices": [0, 1234567],
            "gap": 8,
            "kind": "panels",
            "labels": ["X", "Ÿ"],
            "scale": 1e-07,
            "size": [0.5, 240.0],
            "note": None,
        }
    )
    base = {
        "candidate_key": "k",
        "task_type_legacy": "T_binary",
        "input_type": "panel_composite",
        "question": 'Which "first"?\n\ttab 😀 \\ ü',
        "distractors": [],
        "label_meta_json": "{}",
        "split_group_id": "g/ü",
        "arm_type": None,
    }
    items = pl.DataFrame(
        [
            {
                **base,
                "source": "gm100",
                "unit_id": uid,
                "task_id": "T9",
                "camera": "cam_ü\x7f",
                "answer_text": "Y — ✓",
                "choices": ["X\u0000", "Y — ✓"],
                "answer": "B",
                "num_choices": 2,
                "frame_indices": [1234567, 0],
                "display_labels": ["X", "Ÿ"],
                "render_spec_json": spec,
                "anchor_frame": None,
                "item_key": "k1",
                "image_hashes_json": json.dumps([fake_hash("a"), fake_hash("b")], separators=(",", ":")),
                "split": "eval",
                "eval_level": "L2",
            },
            {
                **base,
                "source": "rh20t",
                "unit_id": "r\u2028",
                "task_id": "T1",
                "camera": "036422060215",
                "answer_text": "contact",
                "choices": ["approach", "contact", "pre-approach", "release"],
                "answer": "B",
                "num_choices": 4,
                "frame_indices": [5],
                "display_labels": None,
                "render_spec_json": None,
                "anchor_frame": 5,
                "item_key": "k2",
                "image_hashes_json": json.dumps([fake_hash("c")]),
                "split": "sft",
                "eval_level": None,
                "split_group_id": "g2",
                "arm_type": "single_arm",
            },
        ],
        schema_overrides={"anchor_frame": pl.Int64, "display_labels": pl.List(pl.String)},
    )
    return items, units


# What the per-row build (a Python dict per row through pyarrow, json.dumps per jsonl line) gave for _tricky().
OLD_EVAL_ROW = {
    "item_id": "pb_v2_eval_000001",
    "split": "eval",
    "source": "GM-100",
    "source_slug": "gm100",
    "source_task_id": "task_0000\xe9",
    "source_unit_type": "episode",
    "source_unit_id": 'task_00001__\xe9pisode "7"\\x',
    "task_id": "T9",
    "task_name": "Temporal Priority Prediction",
    "task_type_legacy": "T_binary",
    "input_type": "panel_composite",
    "question": 'Which "first"?\n\ttab \U0001f600 \\ \xfc',
    "choice_A": "X\x00",
    "choice_B": "Y \u2014 \u2713",
    "choice_C": None,
    "choice_D": None,
    "choice_E": None,
    "choice_F": None,
    "answer": "B",
    "answer_text": "Y \u2014 \u2713",
    "num_choices": 2,
    "num_frames": 2,
    "frame_indices_json": "[1234567,0]",
    "display_labels_json": '["X","\u0178"]',
    "camera": "cam_\xfc\x7f",
    "arm_type": None,
    "visual_ref": 'gm100/episode/task_00001__\xe9pisode "7"\\x/cam_\xfc\x7f/frames[1234567,000000]',
    "source_episode_ref": 'gm100/episode/task_00001__\xe9pisode "7"\\x',
    "reconstruction_key_json": '{"camera":"cam_\xfc\x7f","frame_indices":[1234567,0],"source":"gm100",'
    '"source_task_id":"task_0000\xe9","source_unit_id":"task_00001__\xe9pisode \\"7\\"\\\\x",'
    '"source_unit_type":"episode"}',
    "task_meta_in_source": False,
    "task_meta_public": False,
    "split_version": "splits_v2",
    "split_group_id": "g/\xfc",
    "builder_version": "processbench_build_v2",
    "prompt_version": "mcqa_letters_v3",
    "sft_target": "<ANSWER>B</ANSWER>",
    "licence": "CC BY 4.0 \u2014 \u2713",
    "render_spec_json": '{"frame_indices":[0,1234567],"gap":8,"kind":"panels","labels":["X","\u0178"],"note":null,'
    '"scale":1e-07,"size":[0.5,240.0]}',
    "image_hashes_json": '["ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",'
    '"3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"]',
    "eval_level": "L2",
}
OLD_SFT_ROW = {
    "item_id": "pb_v2_sft_000001",
    "split": "sft",
    "source": "RH20T",
    "source_slug": "rh20t",
    "source_task_id": "task_0001",
    "source_unit_type": "recording",
    "source_unit_id": "r\u2028",
    "task_id": "T1",
    "task_name": "Phase Recognition",
    "task_type_legacy": "T_binary",
    "input_type": "panel_composite",
    "question": 'Which "first"?\n\ttab \U0001f600 \\ \xfc',
    "choice_A": "approach",
    "choice_B": "contact",
    "choice_C": "pre-approach",
    "choice_D": "release",
    "choice_E": None,
    "choice_F": None,
    "answer": "B",
    "answer_text": "contact",
    "num_choices": 4,
    "num_frames": 1,
    "frame_indices_json": "[5]",
    "display_labels_json": None,
    "camera": "036422060215",
    "arm_type": "single_arm",
    "visual_ref": "rh20t/recording/r\u2028/036422060215/frames[000005]",
    "source_episode_ref": "rh20t/recording/r\u2028",
    "reconstruction_key_json": '{"camera":"036422060215","frame_indices":[5],"source":"rh20t",'
    '"source_task_id":"task_0001","source_unit_id":"r\u2028","source_unit_type":"recording"}',
    "task_meta_in_source": True,
    "task_meta_public": False,
    "split_version": "splits_v2",
    "split_group_id": "g2",
    "builder_version": "processbench_build_v2",
    "prompt_version": "mcqa_letters_v3",
    "sft_target": "<ANSWER>B</ANSWER>",
    "licence": "MIT",
    "render_spec_json": None,
    "image_hashes_json": '["2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6"]',
    "eval_level": None,
}
# item_uid: the one-row function's uid of what each row holds (pipeline/release/identity.py), last column
OLD_EVAL_ROW["item_uid"] = mcq_uid(OLD_EVAL_ROW, "default")
OLD_SFT_ROW["item_uid"] = mcq_uid(OLD_SFT_ROW, "default")
# sha256 of the jsonl mirror the per-row build wrote for each of the two tables (re-pinned for prompt_version v3,
# and for item_uid)
OLD_JSONL_SHA256 = {
    "eval": "5bdb81f82fd06d83c46c54c951745b92bddd308e8910720b1dcb9b41b3d66df8",
    "sft": "3d73cadeae11908b40a21bf001f3067a1a5524f44f683ef91f17ef3b565e036e",
}


def test_tricky_rows_keep_the_per_row_builds_bytes():
    items, units = _tricky()
    ev, sft = writers.release_tables(items, units, make_cfg())
    assert ev.schema == schema.polars_schema() and sft.schema == schema.polars_schema()
    assert ev.rows(named=True) == [OLD_EVAL_ROW] and sft.rows(named=True) == [OLD_SFT_ROW]
    for split, df in (("eval", ev), ("sft", sft)):
        assert hashlib.sha256(io.jsonl_bytes(df)).hexdigest() == OLD_JSONL_SHA256[split]


def test_reference_columns_are_the_reference_strings():
    items, units = _tricky()
    rows = [
        ("gm100", "task_0000é", "episode", 'u "1"\\\u2028', "cam\x00😀", [1234567, 0, 5], "B"),
        ("aist", "t", "recording", "u2", "c", [7], "F"),
    ]
    df = pl.DataFrame(
        rows,
        schema=[
            ("slug", pl.String),
            ("task", pl.String),
            ("ut", pl.String),
            ("uid", pl.String),
            ("cam", pl.String),
            ("frames", pl.List(pl.Int64)),
            ("answer", pl.String),
        ],
        orient="row",
    )
    refs = schema.reference_columns(*(pl.col(c) for c in df.columns))
    got = df.select(**refs).rows(named=True)
    assert got == [
        {
            "visual_ref": schema.visual_ref(s, ut, u, c, f),
            "source_episode_ref": schema.source_episode_ref(s, ut, u),
            "reconstruction_key_json": schema.reconstruction_key_json(s, t, ut, u, c, f),
            "sft_target": schema.sft_target(a),
        }
        for s, t, ut, u, c, f, a in rows
    ]


# ---------------------------------------------------------------- contract rules


def _sound_items() -> pl.DataFrame:
    """make_items() with every image_hashes_json in compact spelling: no row is flagged for a closer look unless a
    test plants a defect in it."""
    items = make_items()
    return items.with_columns(
        image_hashes_json=pl.Series([io.compact_json(json.loads(h)) for h in items["image_hashes_json"]])
    )


def _planted(column: str, value, key=None, items=None) -> pl.DataFrame:
    """_sound_items() with `column` set to `value` in one row (the first eval T1 row unless `key` names another)."""
    items = _sound_items() if items is None else items
    key = key or items.filter((pl.col("split") == "eval") & (pl.col("task_id") == "T1"))["item_key"][0]
    lit = pl.lit(value, dtype=items.schema[column])
    return items.with_columns(pl.when(pl.col("item_key") == key).then(lit).otherwise(pl.col(column)).alias(column))


def test_sound_items_pass():
    ev, sft = writers.release_tables(_sound_items(), make_units(), make_cfg())
    assert ev.height + sft.height == make_items().height


@pytest.mark.parametrize(
    "column, value, match",
    [
        ("num_choices", 7, "num_choices=7 but 4 choices"),
        ("choices", ["pre-approach", "approach", "contact", "release", "release"], "num_choices=4 but 5 choices"),
        ("choices", ["pre-approach", "pre-approach", "contact", "release"], "null or duplicate choices"),
        ("choices", ["pre-approach", None, "contact", "release"], "null or duplicate choices"),
        ("answer", "E", "answer 'E' not among"),
        ("answer", None, "not among"),
        ("answer", "AB", "not among"),
        ("answer_text", "release?", "answer_text is 'release\\?'"),
        ("frame_indices", [], "no frame indices"),
        ("frame_indices", [4, None], "null frame index"),
        ("display_labels", ["X", "Y"], "2 display labels for 1 frames"),
        ("render_spec_json", '{"b":1, "a":2}', "not canonical"),
        ("render_spec_json", "{", "not canonical"),
        ("image_hashes_json", '["abc"]', "sha256"),
        ("image_hashes_json", "[]", "sha256"),
        ("image_hashes_json", "not json", "sha256"),
        ("task_id", "T99", "no public task name configured for T99"),
        ("task_type_legacy", "", "empty task_type_legacy"),
        ("split_group_id", "", "empty split_group_id"),
        ("question", "", "empty question"),
        ("input_type", None, "empty input_type"),
        ("camera", "", "empty camera"),
    ],
)
def test_each_rule_refuses_its_planted_defect(column, value, match):
    items = _planted(column, value)
    with pytest.raises(ValueError, match=match):
        writers.release_tables(items, make_units(), make_cfg())


def test_num_choices_past_the_letters_is_refused():
    """Seven distinct options, the answer on the first: only the count rule sees it."""
    options = ["a", "b", "c", "d", "e", "f", "g"]
    items = _planted("num_choices", 7, items=_planted("choices", options, items=_planted("answer_text", "a")))
    items = _planted("answer", "A", items=items)
    with pytest.raises(ValueError, match="num_choices=7 but 7 choices"):
        writers.release_tables(items, make_units(), make_cfg())


def test_unit_and_table_rules():
    items, units, cfg = _sound_items(), make_units(), make_cfg()
    with pytest.raises(ValueError, match="empty licence"):
        writers.release_tables(items, units.with_columns(licence=pl.lit("")), cfg)
    with pytest.raises(ValueError, match="units table has .* twice"):
        writers.release_tables(items, pl.concat([units, units.tail(1)]), cfg)
    with pytest.raises(ValueError, match="duplicate item_key"):
        writers.release_tables(pl.concat([items, items.head(1)]), units, cfg)
    with pytest.raises(ValueError, match="malformed task_id"):
        writers.release_tables(_planted("task_id", "X1"), units, cfg)
    # a whole group in a split that does not exist is refused, not dropped
    one_unit = pl.col("unit_id") == units["unit_id"][1]
    with pytest.raises(ValueError, match="split 'test' not in"):
        writers.release_tables(
            items.with_columns(split=pl.when(one_unit).then(pl.lit("test")).otherwise(pl.col("split"))), units, cfg
        )


def test_first_row_refused_is_the_first_in_output_order():
    items = _sound_items()
    ev = items.filter(pl.col("split") == "eval").sort("source", "task_id", "anchor_frame")
    first, later = ev["item_key"][0], ev["item_key"][-1]  # gm100 T1 anchor 10 sorts before any rh20t row
    planted = _planted("question", "", key=first, items=_planted("question", "", key=later))
    with pytest.raises(ValueError, match=f"item {first} "):
        writers.release_tables(planted, make_units(), make_cfg())


def test_sound_rows_in_an_unusual_spelling_pass():
    """image_hashes_json with spaces after the commas (json.dumps' default) is flagged by the fast filter, passes
    the full check and is kept as it is."""
    items = make_items()
    spaced = items.filter(pl.col("image_hashes_json").str.contains(", "))
    assert spaced.height
    ev, sft = writers.release_tables(items, make_units(), make_cfg())
    kept = set(pl.concat([ev, sft])["image_hashes_json"].to_list())
    assert set(spaced["image_hashes_json"].to_list()) <= kept


def test_loosely_typed_items_are_read_as_the_per_row_build_read_them():
    """Counts and frame indices as floats are taken as integers (the per-row build took int() of them), and
    display labels null throughout (the Null type) are null labels."""
    items = _sound_items()
    want = writers.release_tables(items, make_units(), make_cfg())
    loose = items.filter(pl.col("display_labels").is_null()).with_columns(
        num_choices=pl.col("num_choices").cast(pl.Float64),
        frame_indices=pl.col("frame_indices").cast(pl.List(pl.Float64)),
        display_labels=pl.lit(None),
    )
    assert loose.schema["display_labels"] == pl.Null
    got = writers.release_tables(loose, make_units(), make_cfg())
    for split in range(2):
        plain = want[split].filter(pl.col("display_labels_json").is_null()).drop("item_id")
        assert got[split].drop("item_id").equals(plain)
