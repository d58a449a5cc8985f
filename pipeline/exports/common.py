"""Shared pieces of every export: the export config, the model-facing prompt of a release row, its image
references (relative to the folder `processbench reconstruct --out` writes) and the leak check that keeps frame
indices, render specs, reconstruction keys and display mappings out of model-facing text (they give T8/T9 away)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.release import writers
from pipeline.core import io
from pipeline.release.files import image_filename
from pipeline.release.prompts import format_prompt
from pipeline.release.files import level_file_name
from pipeline.release.schema import CHOICE_LETTERS, COLUMN_NAMES, MODEL_FACING_COLUMNS

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

IMAGE_TAG = "<image>"
# Columns that locate or render frames: never in model-facing text.
HIDDEN_COLUMNS = (
    "frame_indices_json",
    "display_labels_json",
    "render_spec_json",
    "reconstruction_key_json",
    "visual_ref",
    "source_episode_ref",
    "image_hashes_json",
)
LEAK_TOKENS = (
    "frame_indices",
    "frame_index",
    "render_spec",
    "reconstruction_key",
    "display_label",
    "visual_ref",
    "frames[",
    "image_hashes",
)


def export_files(cfg: Settings) -> dict[str, str]:
    return cfg.exports.files.model_dump()


def hf_split(cfg: Settings, split: str) -> str:
    return cfg.release.hf_split_names[split]


def recorded_warnings(release_dir: Path, cfg: Settings) -> list[str]:
    """The warnings the build recorded in the release's provenance.json (the card repeats them); [] when none."""
    try:
        doc = json.loads((Path(release_dir) / writers.file_names(cfg)["provenance"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = doc.get("warnings") if isinstance(doc, dict) else None
    return [str(w) for w in found] if isinstance(found, list) else []


# Release columns a model may not be shown: they locate, render or identify the frames (any of frame indices,
# visual_ref, reconstruction key or render spec gives T8/T9 away) or carry bookkeeping no prompt needs.
RECONSTRUCTION_ONLY = tuple(c for c in COLUMN_NAMES if c not in MODEL_FACING_COLUMNS)
IMAGES_COLUMN = "images"  # the image references beside the model-facing columns


@dataclass(frozen=True)
class Part:
    """One split of the card and of every export: an eval level (L1, L2, ...) or, without levels, the eval split;
    or the SFT split. `name` is its Hugging Face split name (the level, else configs/release.yaml hf_split_names)."""

    split: str
    level: str | None
    name: str
    df: pl.DataFrame

    def file(self, rel: str) -> str:
        """The part's file of an export named `rel` (the eval name; L1 keeps it, other levels add `_<level>`)."""
        return level_file_name(rel, self.level) if self.split == "eval" else rel


def parts(tables: dict[str, pl.DataFrame], cfg: Settings) -> list[Part]:
    """The eval levels in order (or the one eval split without levels), then SFT; a part with no rows is left out."""
    out = [
        Part("eval", lv, lv or hf_split(cfg, "eval"), df)
        for lv, df in writers.eval_level_tables(tables["eval"]).items()
    ]
    out.append(Part("sft", None, hf_split(cfg, "sft"), tables["sft"]))
    return [p for p in out if p.df.height]


def model_facing_table(df: pl.DataFrame, cfg: Settings) -> pl.DataFrame:
    """What a model may be shown of a release table: MODEL_FACING_COLUMNS and the image references."""
    images = [image_refs(r, cfg) for r in df.select("item_id", "num_frames", "image_hashes_json").iter_rows(named=True)]
    return df.select(MODEL_FACING_COLUMNS).with_columns(pl.Series(IMAGES_COLUMN, images, dtype=pl.List(pl.String)))


def reconstruction_table(df: pl.DataFrame) -> pl.DataFrame:
    """What rebuilds and checks the images, joined to the model-facing rows by item_id."""
    return df.select("item_id", *RECONSTRUCTION_ONLY)


def num_images(row: dict) -> int:
    """Images the renderer writes for an item: one per recorded hash (T9 composes two frames into one panel);
    without hashes, one per frame."""
    if row.get("image_hashes_json"):
        return len(json.loads(row["image_hashes_json"]))
    return int(row["num_frames"])


def image_refs(row: dict, cfg: Settings) -> list[str]:
    prefix = cfg.exports.images_prefix
    return [f"{prefix}/{image_filename(row['item_id'], k)}" for k in range(num_images(row))]


def prompt(row: dict, cfg: Settings) -> str:
    """The user prompt of the public protocol (question, options, output protocol), without image tags."""
    return format_prompt(row, cfg)


def options(row: dict) -> list[str]:
    return [row[f"choice_{c}"] for c in CHOICE_LETTERS[: int(row["num_choices"])]]


def _hidden_values(row: dict) -> list[tuple[str, str]]:
    """(column, text) of a row's hidden frame data as it could appear in a model-facing text."""
    out = []
    for col in HIDDEN_COLUMNS:
        v = row.get(col)
        if v and len(str(v)) >= 3:
            out.append((col, str(v)))
    frames = json.loads(row["frame_indices_json"]) if row.get("frame_indices_json") else []
    if len(frames) > 1:  # the index list written out in prose
        out.append(("frame_indices_json", ", ".join(map(str, frames))))
    if row.get("source_unit_id"):
        out.append(("source_unit_id", row["source_unit_id"]))
    return out


def model_text_leaks(text: str, row: dict, hidden: list[tuple[str, str]] | None = None) -> list[str]:
    """What of a row's hidden frame data appears in a model-facing text (empty list = clean). `hidden`: the row's
    `_hidden_values`, when the caller checks several texts of it."""
    lowered = text.lower()
    found = [t for t in LEAK_TOKENS if t in lowered]
    return found + [col for col, v in (_hidden_values(row) if hidden is None else hidden) if v in text]


def check_model_text(texts: list[str], row: dict, what: str, hidden: list[tuple[str, str]] | None = None) -> None:
    hidden = _hidden_values(row) if hidden is None else hidden
    leaks = sorted({x for t in texts for x in model_text_leaks(t, row, hidden)})
    if leaks:
        raise ValueError(f"{what}: item {row['item_id']}: model-facing text carries {leaks}")


@dataclass(frozen=True)
class ModelRow:
    """A release row with what every trainer / harness export shows the model: its prompt and image references."""

    row: dict
    prompt: str
    images: list[str]
    hidden: list[tuple[str, str]]  # _hidden_values(row)

    @property
    def user_turn(self) -> str:
        """One `<image>` tag per image, then the prompt (LLaMA-Factory requires tags == len(images))."""
        return IMAGE_TAG * len(self.images) + "\n" + self.prompt


def model_rows(df: pl.DataFrame, cfg: Settings) -> list[ModelRow]:
    """The table's rows, each prompt built and checked once for all the exports: the user turn (the prompt with its
    image tags) and the SFT target must carry no hidden frame data. A text inside the user turn (the prompt the GRPO
    and lmms-eval rows show) carries nothing the user turn does not, so it needs no check of its own."""
    out = []
    for r in df.iter_rows(named=True):
        m = ModelRow(r, prompt(r, cfg), image_refs(r, cfg), _hidden_values(r))
        check_model_text([m.user_turn, r["sft_target"]], r, "exports", m.hidden)
        out.append(m)
    return out


_JSONL_ROW = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # json.dumps would build one per row


def jsonl(rows: list[dict]) -> str:
    return "".join(_JSONL_ROW.encode(r) + "\n" for r in rows)


def dumps(obj) -> str:
    return io.dumps_json(obj)


def safe_name(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")
