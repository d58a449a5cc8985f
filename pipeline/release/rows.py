"""The release rows: ITEMS (after the split) + IR units -> the eval/SFT tables in the public row schema
(pipeline/release/schema.py); `pipeline/release/writers.py` writes them.

    eval_df, sft_df = release_tables(items, units, cfg)
    tables = read_tables(release_dir, cfg[, levels=True])   # read back from a written release: {"eval", "sft"}

Row order and item ids. Within each split, rows are sorted by
    (source in configured order [build.sources], task number (T1 < T2 < ... < T12), source_unit_id,
     anchor_frame, frame_indices, item_key)
and numbered from 1: item_id = f"{item_id_prefix}_{split}_{n:06d}".

The tables are built column by column in polars (a Python dict per row cost seconds at release scale); the JSON and
reference columns come from `pipeline/core/io.py` `compact_json_column` and `pipeline/release/schema.py` `reference_columns`,
which give the same text as their one-value counterparts.

Checks. `row_problem` states the per-row contract in plain Python and words every error. Only the rows `_suspects`
flags meet it: `_suspects` is a polars filter that flags every row a rule could refuse (and possibly some sound ones,
e.g. an image_hashes_json with spaces), so the first row refused, in output order, is the one a check of every row
would have refused first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import re
from pathlib import Path

import polars as pl

from pipeline.core import io
from pipeline.release.files import eval_level_files, file_names, source_names, task_number
from pipeline.release.identity import MCQ_UID_COLUMNS, mcq_uid, template_variants
from pipeline.release.schema import (
    CHOICE_COLUMNS,
    CHOICE_LETTERS,
    COLUMN_NAMES,
    MAX_CHOICES,
    polars_schema,
    reference_columns,
)

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

SPLITS = ("eval", "sft")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
# image_hashes_json as the frames stage writes it (compact_json of a list of digests); any other spelling is
# flagged and left to row_problem, which parses it
_HASHES_COMPACT = r'^\["[0-9a-f]{64}"(,"[0-9a-f]{64}")*\]$'

# ITEMS-contract columns the writers read (eval_level is optional).
REQUIRED_ITEM_COLUMNS = (
    "source",
    "unit_id",
    "task_id",
    "task_type_legacy",
    "input_type",
    "camera",
    "question",
    "answer_text",
    "num_choices",
    "frame_indices",
    "display_labels",
    "render_spec_json",
    "anchor_frame",
    "arm_type",
    "item_key",
    "choices",
    "answer",
    "image_hashes_json",
    "split",
    "split_group_id",
)
REQUIRED_UNIT_COLUMNS = ("source", "unit_id", "unit_type", "task_id", "licence", "language")
_NON_EMPTY = ("question", "task_type_legacy", "input_type", "camera", "licence")


def _check_columns(df: pl.DataFrame, required, what: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks columns {missing}")


def _canonical_json(text: str) -> bool:
    try:
        return io.compact_json(json.loads(text)) == text
    except ValueError:
        return False


def _hash_list(text: str) -> bool:
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return isinstance(parsed, list) and bool(parsed) and all(isinstance(h, str) and HEX64.match(h) for h in parsed)


def row_problem(r: dict, tnames: dict) -> str | None:
    """What breaks the release contract in one item row (with its unit's `licence`), or None when it is sound."""
    what = f"item {r['item_key']} ({r['source']}/{r['unit_id']} {r['task_id']})"
    n = r["num_choices"]
    choices = list(r["choices"] or [])
    if n is None or not 2 <= n <= MAX_CHOICES or len(choices) != n:
        return f"{what}: num_choices={n} but {len(choices)} choices (2..{MAX_CHOICES} allowed)"
    if any(c is None for c in choices) or len(set(choices)) != n:
        return f"{what}: null or duplicate choices {choices}"
    letters = list(CHOICE_LETTERS[:n])  # a list: "AB" is in the string "ABCD"
    if r["answer"] not in letters:
        return f"{what}: answer {r['answer']!r} not among {letters}"
    if choices[letters.index(r["answer"])] != r["answer_text"]:
        return (
            f"{what}: answer {r['answer']} is {choices[letters.index(r['answer'])]!r}, "
            f"answer_text is {r['answer_text']!r}"
        )
    frames = list(r["frame_indices"] or [])
    if not frames:
        return f"{what}: no frame indices"
    if any(i is None for i in frames):
        return f"{what}: null frame index in {frames}"
    labels = r["display_labels"]
    if labels is not None and len(labels) != len(frames):
        return f"{what}: {len(labels)} display labels for {len(frames)} frames"
    if r["render_spec_json"] is not None and not _canonical_json(r["render_spec_json"]):
        return f"{what}: render_spec_json is not canonical compact sorted JSON"
    if r["image_hashes_json"] is not None and not _hash_list(r["image_hashes_json"]):
        return f"{what}: image_hashes_json is not a list of sha256 hex digests"
    if r["task_id"] not in tnames:
        return f"{what}: no public task name configured for {r['task_id']}"
    if r["split"] not in SPLITS:
        return f"{what}: split {r['split']!r} not in {SPLITS}"
    if not r["split_group_id"]:
        return f"{what}: empty split_group_id"
    for col in _NON_EMPTY:
        if not r[col]:
            return f"{what}: empty {col}"
    return None


def _suspects(tnames: dict, bad_specs: list[str]) -> pl.Expr:
    """True for every row row_problem could refuse (a rule whose inputs are null counts as broken)."""
    n, choices, frames, labels = (
        pl.col("num_choices"),
        pl.col("choices"),
        pl.col("frame_indices"),
        pl.col("display_labels"),
    )
    answer_at = pl.col("answer").replace_strict(
        {c: i for i, c in enumerate(CHOICE_LETTERS)}, default=None, return_dtype=pl.Int64
    )
    spec, hashes = pl.col("render_spec_json"), pl.col("image_hashes_json")
    rules = [
        ~n.is_between(2, MAX_CHOICES) | (choices.list.len() != n),
        choices.list.drop_nulls().list.n_unique() != n,
        # an answer that is no letter, or a letter past the options, reads a null option: counted as broken
        choices.list.get(answer_at, null_on_oob=True) != pl.col("answer_text"),
        frames.list.drop_nulls().list.len() != frames.list.len(),
        frames.list.len() == 0,
        labels.is_not_null() & (labels.list.len() != frames.list.len()),
        spec.is_not_null() & spec.is_in(bad_specs),
        hashes.is_not_null() & ~hashes.str.contains(_HASHES_COMPACT),
        ~pl.col("task_id").is_in(list(tnames)),
        ~pl.col("split").is_in(SPLITS),
        *((pl.col(c).is_null() | (pl.col(c) == "")) for c in ("split_group_id", *_NON_EMPTY)),
    ]
    return pl.any_horizontal(*(rule.fill_null(True) for rule in rules))


def _joined(items: pl.DataFrame, units: pl.DataFrame, names: dict) -> pl.DataFrame:
    """The items with their unit's type, task, licence and whether it carries task language; refuses a unit listed
    twice, a repeated item key, an unconfigured source and an item whose unit is not in the table."""
    units = units.select(REQUIRED_UNIT_COLUMNS)
    first = units.select(pl.struct("source", "unit_id").is_first_distinct()).to_series()
    if not first.all():
        u = units.filter(~first).row(0, named=True)
        raise ValueError(f"units table has {(u['source'], u['unit_id'])} twice")
    if items.get_column("item_key").n_unique() != items.height:
        raise ValueError("items carry duplicate item_key values")
    cols = list(REQUIRED_ITEM_COLUMNS) + (["eval_level"] if "eval_level" in items.columns else [])
    meta = units.select(
        "source",
        "unit_id",
        pl.col("unit_type").alias("_unit_type"),
        pl.col("task_id").alias("_unit_task"),
        "licence",
        pl.lit(True).alias("_known"),
        # Python's idea of blank (str.strip), as the rest of the build has it
        pl.Series(
            "_meta_in_source",
            [bool(x and str(x).strip()) for x in units.get_column("language").to_list()],
            dtype=pl.Boolean,
        ),
    )
    # the per-row build took int() of counts and frame indices; a list column that is null throughout may come as
    # the Null type, which has no list operations
    typed = [
        pl.col("num_choices").cast(pl.Int64),
        pl.col("frame_indices").cast(pl.List(pl.Int64)),
        *(pl.col(c).cast(pl.List(pl.String)) for c in ("choices", "display_labels") if items.schema[c] == pl.Null),
    ]
    joined = (
        items.select(cols).with_columns(typed).with_row_index("_row").join(meta, on=["source", "unit_id"], how="left")
    )
    if "eval_level" not in cols:
        joined = joined.with_columns(eval_level=pl.lit(None, dtype=pl.String))
    unknown = joined.filter((~pl.col("source").is_in(list(names)) | pl.col("_known").is_null()).fill_null(True))
    if unknown.height:
        r = unknown.sort("_row").row(0, named=True)
        if r["source"] not in names:
            raise ValueError(f"item {r['item_key']}: source {r['source']!r} not configured in build.sources")
        raise ValueError(f"item {r['item_key']}: unit {r['source']}/{r['unit_id']} not in the units table")
    return joined


def _uid_column(exprs: dict[str, pl.Expr], variants: dict[str, str]) -> pl.Expr:
    """item_uid of every row, from the row's own release columns (pipeline/release/identity.py mcq_uid)."""
    needed = (*MCQ_UID_COLUMNS, *CHOICE_COLUMNS)

    def uids(s: pl.Series) -> pl.Series:
        return pl.Series([mcq_uid(r, variants[r["task_id"]]) for r in s.to_list()], dtype=pl.String)

    return pl.struct(*(exprs[c].alias(c) for c in needed)).map_batches(uids, return_dtype=pl.String)


def _columns(split: str, rc: dict, names: dict, tnames: dict, variants: dict[str, str]) -> list[pl.Expr]:
    """The release columns of one split's sorted rows, in schema order."""
    col = pl.col
    refs = reference_columns(
        col("source"),
        col("_unit_task"),
        col("_unit_type"),
        col("unit_id"),
        col("camera"),
        col("frame_indices"),
        col("answer"),
    )
    exprs = {
        "item_id": pl.concat_str(
            [pl.lit(f"{rc.item_id_prefix}_{split}_"), pl.int_range(1, pl.len() + 1).cast(pl.String).str.zfill(6)]
        ),
        "split": col("split"),
        "source": col("source").replace_strict(names, return_dtype=pl.String),
        "source_slug": col("source"),
        "source_task_id": col("_unit_task"),
        "source_unit_type": col("_unit_type"),
        "source_unit_id": col("unit_id"),
        "task_id": col("task_id"),
        "task_name": col("task_id").replace_strict(tnames, return_dtype=pl.String),
        **{c: col(c) for c in ("task_type_legacy", "input_type", "question")},
        **{c: col("choices").list.get(i, null_on_oob=True) for i, c in enumerate(CHOICE_COLUMNS)},
        **{c: col(c) for c in ("answer", "answer_text", "num_choices")},
        "num_frames": col("frame_indices").list.len(),
        "frame_indices_json": io.compact_json_column(col("frame_indices")),
        "display_labels_json": io.compact_json_column(col("display_labels")),
        **{c: col(c) for c in ("camera", "arm_type")},
        **{c: refs[c] for c in ("visual_ref", "source_episode_ref", "reconstruction_key_json")},
        "task_meta_in_source": col("_meta_in_source"),
        "task_meta_public": pl.lit(False),
        "split_version": pl.lit(rc.split_version),
        "split_group_id": col("split_group_id"),
        "builder_version": pl.lit(rc.builder_version),
        "prompt_version": pl.lit(rc.prompt_version),
        "sft_target": refs["sft_target"],
        **{c: col(c) for c in ("licence", "render_spec_json", "image_hashes_json", "eval_level")},
    }
    exprs["item_uid"] = _uid_column(exprs, variants)
    if list(exprs) != list(COLUMN_NAMES):
        raise AssertionError(f"release columns out of step with pipeline/release/schema.py: {list(exprs)}")
    return [e.alias(c) for c, e in exprs.items()]


def release_tables(items: pl.DataFrame, units: pl.DataFrame, cfg: Settings) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(eval, sft) release tables in the schema of pipeline/release/schema.py, rows sorted and numbered (see module doc).
    Raises ValueError on any contract violation (unknown unit, bad answer, missing column, ...): nothing is dropped."""
    _check_columns(items, REQUIRED_ITEM_COLUMNS, "items")
    _check_columns(units, REQUIRED_UNIT_COLUMNS, "units")
    rc = cfg.release
    names, tnames = source_names(cfg), cfg.task_names()
    variants = template_variants(cfg)
    rows = _joined(items, units, names)
    # A group id names one isolation group: it never spans splits.
    both = rows.group_by("split_group_id").agg(pl.col("split").n_unique().alias("n")).filter(pl.col("n") > 1)
    if both.height:
        leaked = both.get_column("split_group_id").sort().to_list()
        raise ValueError(f"{len(leaked)} split groups lie in both splits, e.g. {leaked[:3]}")
    numbers = {t: task_number(t) for t in rows.get_column("task_id").unique().to_list()}
    rows = rows.sort(
        pl.col("split").replace_strict(
            {s: i for i, s in enumerate(SPLITS)}, default=len(SPLITS), return_dtype=pl.Int64
        ),
        pl.col("source").replace_strict({slug: i for i, slug in enumerate(names)}, return_dtype=pl.Int64),
        pl.col("task_id").replace_strict(numbers, return_dtype=pl.Int64),
        "unit_id",
        pl.col("anchor_frame").cast(pl.Int64).fill_null(-1),
        "frame_indices",
        "item_key",
    )
    bad_specs = [
        s for s in rows.get_column("render_spec_json").drop_nulls().unique().to_list() if not _canonical_json(s)
    ]
    for r in rows.filter(_suspects(tnames, bad_specs)).iter_rows(named=True):
        problem = row_problem(r, tnames)
        if problem:
            raise ValueError(problem)
    schema = polars_schema()
    eval_df, sft_df = (
        rows.filter(pl.col("split") == split).select(_columns(split, rc, names, tnames, variants)).cast(schema)
        for split in SPLITS
    )
    return eval_df, sft_df


def read_tables(release_dir: Path, cfg: Settings, levels: bool = False) -> dict[str, pl.DataFrame]:
    """The two release tables, by split column value (eval, sft). levels=True: `eval` holds every eval level (the
    main eval file, L1, then each level file split_summary.json lists, in level order), as the exports read it."""
    files = file_names(cfg)
    out = {}
    for split in SPLITS:
        rels = (
            list(eval_level_files(release_dir, cfg).values())
            if levels and split == "eval"
            else [files[f"{split}_parquet"]]
        )  # eval_level_files: the main eval file first, then the levels
        for rel in rels:
            if not (Path(release_dir) / rel).is_file():
                raise FileNotFoundError(f"release {Path(release_dir).resolve()}: missing {rel}")
        out[split] = pl.concat([pl.read_parquet(Path(release_dir) / rel) for rel in rels], how="vertical_relaxed")
    return out
