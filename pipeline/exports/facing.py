"""What a model may be shown: every model-facing file of the release (the card's model-facing configs under
exports/hf/, and every trainer / harness jsonl and TSV under exports/) carries no release column outside
`schema.MODEL_FACING_COLUMNS` (frame indices, visual refs, reconstruction keys, render specs, display labels, image
hashes and the bookkeeping live in the card's `reconstruction` config, joined by item_id). The card's model-facing
parquet files hold exactly those columns and the image references.

The exports refuse such a file before writing it (`text_problems`, `check_table`); `processbench validate` checks the
files on disk (`release_problems`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

import pyarrow.parquet as pq

from pipeline.exports import common
from pipeline.release.schema import MODEL_FACING_COLUMNS

if TYPE_CHECKING:
    from pipeline.settings.root import Settings

_TABLE_COLUMNS = frozenset(MODEL_FACING_COLUMNS) | {common.IMAGES_COLUMN}
_HIDDEN = frozenset(common.RECONSTRUCTION_ONLY)
_MODEL_FACING_SUFFIXES = (".jsonl", ".tsv")


def _exports_dir(cfg: Settings) -> str:
    """The exports folder (a configuration without an exports section, as a bare release check uses: the default)."""
    return cfg.exports.dir


def _is_model_facing_text(rel: str, cfg: Settings) -> bool:
    return rel.startswith(_exports_dir(cfg) + "/") and rel.endswith(_MODEL_FACING_SUFFIXES)


def text_kind(rel: str, cfg: Settings) -> str | None:
    """How text_problems reads the text of file `rel`: "tsv" (its header), "keys" (a jsonl's keys), None (not a
    model-facing text: nothing to read). Two files of one kind get the same answer for the same text."""
    if not _is_model_facing_text(rel, cfg):
        return None
    return "tsv" if rel.endswith(".tsv") else "keys"


def text_problems(rel: str, text: str, cfg: Settings) -> list[str]:
    """A model-facing export text's columns that a model may not see (empty for any other file): a TSV's header, a
    jsonl's keys at any depth (in compact JSON an unescaped `"name":` is a key, never text inside a string)."""
    kind = text_kind(rel, cfg)
    if kind is None:
        return []
    if kind == "tsv":
        found = set(text.split("\n", 1)[0].rstrip("\r").split("\t")) & _HIDDEN
    else:
        found = {c for c in _HIDDEN if f'"{c}":' in text}
    return [f"column {c} (not model-facing)" for c in sorted(found)]


def table_problems(rel: str, columns: list[str]) -> list[str]:
    from pipeline.exports.steps import STEP_CONFIG, STEP_CONFIG_COLUMNS

    allowed = frozenset(STEP_CONFIG_COLUMNS) if Path(rel).parent.name == STEP_CONFIG else _TABLE_COLUMNS
    return [f"{rel}: column {c} (not model-facing)" for c in columns if c not in allowed]


def check_table(rel: str, df) -> None:
    if problems := table_problems(rel, list(df.columns)):
        raise ValueError(f"model-facing config file carries columns a model may not see: {problems}")


def release_problems(release_dir: Path, cfg: Settings, skip=frozenset()) -> list[str]:
    """Every model-facing file of a release folder that carries a column a model may not see (the files in `skip`,
    too large to read, left out: the validator reports them by themselves)."""
    from pipeline.exports.card import RECONSTRUCTION_CONFIG
    from pipeline.exports.steps import STEP_RECONSTRUCTION_CONFIG

    root = Path(release_dir)
    folder = root / _exports_dir(cfg)
    problems = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        rel = path.relative_to(root).as_posix()
        if rel in skip:
            continue
        if path.suffix == ".parquet" and path.parent.parent.name == "hf":
            if path.parent.name not in (RECONSTRUCTION_CONFIG, STEP_RECONSTRUCTION_CONFIG):
                problems += table_problems(rel, pq.read_schema(path).names)
        elif _is_model_facing_text(rel, cfg):
            try:
                found = text_problems(rel, path.read_text(encoding="utf-8"), cfg)
            except (UnicodeDecodeError, ValueError) as exc:
                found = [f"unreadable ({type(exc).__name__})"]
            problems += [f"{rel}: {p}" for p in found]
    return problems
