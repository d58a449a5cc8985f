"""The release row schema: one ordered Arrow schema with a description per column, and the path-free reference strings.

This module is the one place the release columns are defined. The writers build the eval/SFT tables in this order,
`metadata/schema.md` is generated from it (`schema_markdown`), and the validator compares every release parquet with it.
The columns up to `sft_target` are the public RoboProcessBench row schema (docs/release-format.md, in its order);
`licence`, `render_spec_json`, `image_hashes_json`, `eval_level` and `item_uid` are our additions (docs/release-format.md;
`item_uid`: pipeline/release/identity.py).

Reference strings (docs/upstream-formats.md), built only from path-free keys:
    visual_ref              = "{slug}/{unit_type}/{unit_id}/{camera}/frames[{i:06d},{j:06d},...]"
    source_episode_ref      = "{slug}/{unit_type}/{unit_id}"
    reconstruction_key_json = compact sorted JSON {"camera","frame_indices","source","source_task_id",
                              "source_unit_id","source_unit_type"}; "source" is the slug (the adapter key).
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from pipeline.core.io import compact_json, compact_json_column
from pipeline.settings.models import ReleaseFile
from upstream_adapters import ADAPTERS

CHOICE_LETTERS = "ABCDEF"
MAX_CHOICES = len(CHOICE_LETTERS)
CHOICE_COLUMNS = tuple(f"choice_{c}" for c in CHOICE_LETTERS)
# What a model may be shown: model-facing configs and exports carry only these columns (plus the images).
MODEL_FACING_COLUMNS = (
    "item_id",
    "item_uid",  # a one-way digest over fields no model-facing file shows (pipeline/release/identity.py)
    "source",
    "task_id",
    "task_name",
    "eval_level",
    "split_group_id",
    "question",
    *CHOICE_COLUMNS,
    "num_choices",
    "answer",
)

_S, _I, _B = pa.string(), pa.int64(), pa.bool_()

# (name, Arrow type, nullable, description) in release order.
COLUMNS: tuple[tuple[str, pa.DataType, bool, str], ...] = (
    (
        "item_id",
        _S,
        False,
        "Stable public id `{prefix}_{split}_{n:06d}`, numbered per split after the deterministic sort.",
    ),
    ("split", _S, False, "`eval` or `sft` (Hugging Face split names: see the manifests' `hf_split`)."),
    ("source", _S, False, "Source display name (configs/sources.yaml `name`; see Sources below)."),
    ("source_slug", _S, False, "Source slug: %s." % ", ".join(ADAPTERS)),
    ("source_task_id", _S, False, "The source's own task id (e.g. task_00001); no local paths."),
    ("source_unit_type", _S, False, "Isolation unit type: `episode` or `recording`."),
    ("source_unit_id", _S, False, "The isolation unit (e.g. task_00001__episode_000007)."),
    ("task_id", _S, False, "Task family T1..T12."),
    ("task_name", _S, False, "Public task-family name."),
    (
        "task_type_legacy",
        _S,
        False,
        "Legacy engineering alias (T_progress for T5, T_temporal for T8, T_binary for T9).",
    ),
    (
        "input_type",
        _S,
        False,
        "How the frames are shown: single_frame, multi_frame, frame_sequence, labelled_frames, panel_composite, ...",
    ),
    ("question", _S, False, "Question text (task language is never included)."),
    *(
        (f"choice_{c}", _S, i >= 2, f"Option {c}." if i < 2 else f"Option {c}; null when num_choices < {i + 1}.")
        for i, c in enumerate(CHOICE_LETTERS)
    ),
    ("answer", _S, False, "Correct option letter (A..F; T8 and T9 too)."),
    ("answer_text", _S, False, "Text of the correct option (T8: the true permutation of X/Y/Z; T9: X or Y)."),
    ("num_choices", _I, False, "Number of options (2..6); choice columns beyond it are null."),
    ("num_frames", _I, False, "Number of source frames referenced (= length of frame_indices_json)."),
    ("frame_indices_json", _S, False, "JSON list of frame indices on `camera`, in display order."),
    ("display_labels_json", _S, True, "JSON list of the labels drawn on the frames/panels (T8 X,Y,Z; T9 X,Y) or null."),
    ("camera", _S, False, "Camera name in the source."),
    ("arm_type", _S, True, "Arm layout of the item (single_left, single_right, bimanual_sync, ...) or null."),
    (
        "visual_ref",
        _S,
        False,
        "Path-free frame reference `{slug}/{unit_type}/{unit_id}/{camera}/frames[{6-digit,...}]`.",
    ),
    ("source_episode_ref", _S, False, "Path-free unit reference `{slug}/{unit_type}/{unit_id}`."),
    (
        "reconstruction_key_json",
        _S,
        False,
        "Compact sorted JSON: camera, frame_indices, source (slug), source_task_id, source_unit_id, source_unit_type.",
    ),
    ("task_meta_in_source", _B, False, "Whether the source unit carries task language (never shown in prompts)."),
    ("task_meta_public", _B, False, "Whether task language is in this release: always false."),
    ("split_version", _S, False, "Version of the split rule that assigned `split`."),
    ("split_group_id", _S, False, "Isolation group; a group lies wholly in one split."),
    ("builder_version", _S, False, "Version of the builder that produced the row."),
    ("prompt_version", _S, False, "Version of the prompt protocol (metadata/prompt_templates.md)."),
    ("sft_target", _S, False, "Training target `<ANSWER>{answer}</ANSWER>`."),
    ("licence", _S, False, "Licence of the source unit the frames come from."),
    (
        "render_spec_json",
        _S,
        True,
        "How labelled frames / panel composites are rendered (T8, T9), compact sorted JSON; "
        "null when frames are shown as decoded.",
    ),
    (
        "image_hashes_json",
        _S,
        True,
        "JSON list of sha256 hex digests of the images shown to the model, in order "
        "(one per frame; one for a panel composite).",
    ),
    ("eval_level", _S, True, "Out-of-distribution level (L1/L2/L3) when the split defines them, else null."),
    (
        "item_uid",
        _S,
        False,
        "What the item is, the same in every build that holds it: 32 hex digits of sha256 over the family, its "
        "template variant, the reconstruction key (frames in display order), the display labels, the question, the "
        "options in order and the answer (not over item_id, split, level or images; docs/release-format.md).",
    ),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c[0] for c in COLUMNS)
DESCRIPTIONS: dict[str, str] = {c[0]: c[3] for c in COLUMNS}
NON_NULLABLE: tuple[str, ...] = tuple(c[0] for c in COLUMNS if not c[2])
RELEASE_SCHEMA = pa.schema([pa.field(n, t, nullable=nl) for n, t, nl, _ in COLUMNS])
# Columns added to the public schema by this builder.
ADDED_COLUMNS = ("licence", "render_spec_json", "image_hashes_json", "eval_level", "item_uid")


def polars_schema() -> pl.Schema:
    """The release schema as Polars dtypes (what a release parquet must read back as, in this order)."""
    return pl.from_arrow(RELEASE_SCHEMA.empty_table()).schema


# ---------------------------------------------------------------- reference strings


def visual_ref(slug: str, unit_type: str, unit_id: str, camera: str, frame_indices) -> str:
    frames = ",".join(f"{int(i):06d}" for i in frame_indices)
    return f"{slug}/{unit_type}/{unit_id}/{camera}/frames[{frames}]"


def source_episode_ref(slug: str, unit_type: str, unit_id: str) -> str:
    return f"{slug}/{unit_type}/{unit_id}"


def _key_fields(slug, task_id, unit_type, unit_id, camera, frame_indices) -> dict:
    return {
        "source": slug,
        "source_task_id": task_id,
        "source_unit_type": unit_type,
        "source_unit_id": unit_id,
        "camera": camera,
        "frame_indices": frame_indices,
    }


def reconstruction_key(slug: str, task_id: str, unit_type: str, unit_id: str, camera: str, frame_indices) -> dict:
    return _key_fields(slug, task_id, unit_type, unit_id, camera, [int(i) for i in frame_indices])


def reconstruction_key_json(slug: str, task_id: str, unit_type: str, unit_id: str, camera: str, frame_indices) -> str:
    return compact_json(reconstruction_key(slug, task_id, unit_type, unit_id, camera, frame_indices))


def sft_target(answer: str) -> str:
    return f"<ANSWER>{answer}</ANSWER>"


def reference_columns(
    slug: pl.Expr,
    task_id: pl.Expr,
    unit_type: pl.Expr,
    unit_id: pl.Expr,
    camera: pl.Expr,
    frame_indices: pl.Expr,
    answer: pl.Expr,
) -> dict[str, pl.Expr]:
    """visual_ref, source_episode_ref, reconstruction_key_json and sft_target as polars expressions over columns
    (frame_indices: a list of integers): the strings of the functions above, built a table at a time
    (tests/test_release_rows.py pins the two to each other)."""
    episode = pl.concat_str([slug, pl.lit("/"), unit_type, pl.lit("/"), unit_id])
    frames = frame_indices.list.eval(pl.element().cast(pl.String).str.zfill(6)).list.join(",")
    key = _key_fields(slug, task_id, unit_type, unit_id, camera, frame_indices)
    return {
        "visual_ref": pl.concat_str([episode, pl.lit("/"), camera, pl.lit("/frames["), frames, pl.lit("]")]),
        "source_episode_ref": episode,
        # compact_json sorts the keys: the struct's fields go in sorted order
        "reconstruction_key_json": compact_json_column(pl.struct(*(key[k].alias(k) for k in sorted(key)))),
        "sft_target": pl.format(sft_target("{}"), answer),
    }


# ---------------------------------------------------------------- schema.md


def schema_markdown(release: ReleaseFile, source_names: dict[str, str]) -> str:
    """metadata/schema.md, generated from COLUMNS and the release config (no hand-written copy exists)."""
    files = release.files
    lines = [
        "# Release row schema",
        "",
        f"Builder `{release.builder_version}`, split `{release.split_version}`, "
        f"prompt `{release.prompt_version}`, release `{release.release_version}`.",
        "",
        f"`{files.eval_parquet}` / `{files.eval_jsonl}` (split `eval`) and "
        f"`{files.sft_parquet}` / `{files.sft_jsonl}` (split `sft`) hold the same columns, in this order. "
        "Each parquet file and its jsonl mirror hold identical rows in identical order (sorted by `item_id`); "
        "jsonl has one compact JSON object per row with the keys in column order and nulls kept.",
        "",
        "Columns up to `sft_target` follow the public RoboProcessBench row schema; "
        + ", ".join(f"`{c}`" for c in ADDED_COLUMNS)
        + " are added by this builder.",
        "",
        "| # | column | type | nullable | description |",
        "|---|---|---|---|---|",
    ]
    for i, (name, dtype, nullable, desc) in enumerate(COLUMNS, 1):
        lines.append(f"| {i} | `{name}` | {dtype} | {'yes' if nullable else 'no'} | {desc.replace('|', '/')} |")
    lines += [
        "",
        "## Sources",
        "",
        "| source_slug | source |",
        "|---|---|",
        *(f"| `{slug}` | {name} |" for slug, name in source_names.items()),
        "",
        "## Reference strings",
        "",
        "- `visual_ref` = `{source_slug}/{source_unit_type}/{source_unit_id}/{camera}/frames[{i:06d},{j:06d},...]`",
        "- `source_episode_ref` = `{source_slug}/{source_unit_type}/{source_unit_id}`",
        "- `reconstruction_key_json` = compact JSON with sorted keys `camera`, `frame_indices`, `source` (the slug), "
        "`source_task_id`, `source_unit_id`, `source_unit_type`.",
        "",
        "## Answers",
        "",
        f"`answer` is always an option letter ({', '.join(CHOICE_LETTERS)}) within `num_choices`, and "
        "`sft_target` is `<ANSWER>{answer}</ANSWER>` for every task, T8 and T9 included.",
        "",
    ]
    return "\n".join(lines)
