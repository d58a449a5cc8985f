"""The release in its users' tools (issue 13): the Hugging Face card, Croissant, trainer / harness exports.

`write_exports(release_dir, eval_df, sft_df, cfg)` writes them from the two release tables; `run_exports(cfg,
release_dir)` reads the tables back from the release and writes the exports. Both re-write checksums.sha256 so every
new file is covered (checksums=False: the caller does, as the release stage does once at its end); both return the
release-relative files written (sorted)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import polars as pl

from pipeline import io, writers
from pipeline.exports import card, common, consumers, croissant
from pipeline.leaks import find_path_leaks


def export_texts(tables: dict[str, pl.DataFrame], cfg: dict) -> Iterator[tuple[str, str]]:
    """Every text export as (release-relative path, text), one at a time (the card and Croissant excepted: see
    write_exports): a table's rows and texts are held only while its own files are made, never all of them at once."""
    xf = common.export_files(cfg)
    yield xf["llamafactory_info"], common.dumps(consumers.llamafactory_info(cfg))
    for split in writers.SPLITS:
        rows = common.model_rows(tables[split], cfg)
        # LLaMA-Factory (sharegpt with OpenAI role tags) and ms-swift read the same `messages` + `images` rows.
        messages = common.jsonl(consumers.messages_rows(rows))
        yield xf[f"llamafactory_{split}"], messages
        yield xf[f"swift_{split}"], messages
        del messages
        yield xf[f"grpo_{split}"], common.jsonl(consumers.grpo_rows(rows))
        if split == "eval":  # the harnesses score the eval split only
            yield xf["vlmevalkit_eval"], consumers.vlmevalkit_tsv(rows, cfg)
            for name, text in consumers.lmms_eval_files(rows, cfg).items():
                yield f"{xf['lmms_eval_dir']}/{name}", text
        del rows


def write_exports(release_dir: Path, eval_df: pl.DataFrame, sft_df: pl.DataFrame, cfg: dict,
                  checksums: bool = True) -> list[str]:
    """Write every export into the release folder (and re-write checksums.sha256); returns the files written. A text
    with a path or identity leak is not written, and the call raises once the others are (the release stage writes
    into a staging folder that a failed step discards)."""
    release_dir = Path(release_dir)
    tables = {"eval": eval_df, "sft": sft_df}
    xf = common.export_files(cfg)
    written, leaks = [], {}
    for rel, text in chain(export_texts(tables, cfg), [(xf["card"], card.card_markdown(tables, cfg))]):
        if found := find_path_leaks(text):
            leaks[rel] = found
            continue
        io.atomic_write_text(release_dir / rel, text)
        written.append(rel)
    if leaks:
        raise ValueError(f"path or identity leaks in exports: {leaks}")
    for name, splits in card.config_tables(tables, cfg).items():
        if name == "default":
            continue
        for rel, df in splits.values():
            io.write_parquet(release_dir / rel, df)
            written.append(rel)
    io.atomic_write_text(release_dir / xf["croissant"], common.dumps(croissant.croissant(tables, release_dir, cfg)))
    written.append(xf["croissant"])
    if checksums:
        writers.write_checksums(release_dir, cfg)
    return sorted(written)


def run_exports(cfg: dict, release_dir: Path, checksums: bool = True) -> list[str]:
    """Exports of the release already written in release_dir."""
    tables = common.read_tables(release_dir, cfg)
    return write_exports(release_dir, tables["eval"], tables["sft"], cfg, checksums=checksums)
