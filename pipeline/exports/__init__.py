"""The release in its users' tools (issue 13): the Hugging Face card, Croissant, trainer / harness exports.

`write_exports(release_dir, eval_df, sft_df, cfg)` writes them from the two release tables (eval: every level);
`run_exports(cfg, release_dir)` reads the tables back from the release (every level file) and writes the exports.
Every export has one file per part (each eval level, then SFT: `common.parts`). Both re-write checksums.sha256 so
every new file is covered (checksums=False: the caller does, as the release stage does once at its end); both return
the release-relative files written (sorted)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from pathlib import Path

import polars as pl

from pipeline import io, writers
from pipeline.exports import card, common, consumers, croissant, facing, lmms
from pipeline.leaks import find_path_leaks


def export_texts(tables: dict[str, pl.DataFrame], cfg: dict) -> Iterator[tuple[str, str]]:
    """Every text export as (release-relative path, text), one at a time (the card and Croissant excepted: see
    write_exports): a part's rows and texts are held only while its own files are made (the eval levels' rows until
    the harness files over all of them are made), never all of them at once."""
    xf = common.export_files(cfg)
    parts = common.parts(tables, cfg)
    yield xf["llamafactory_info"], common.dumps(consumers.llamafactory_info(parts, cfg))
    eval_parts = []
    for part in parts:
        rows = common.model_rows(part.df, cfg)
        # LLaMA-Factory (sharegpt with OpenAI role tags) and ms-swift read the same `messages` + `images` rows.
        messages = common.jsonl(consumers.messages_rows(rows))
        yield part.file(xf[f"llamafactory_{part.split}"]), messages
        yield part.file(xf[f"swift_{part.split}"]), messages
        del messages
        yield part.file(xf[f"grpo_{part.split}"]), common.jsonl(consumers.grpo_rows(rows))
        if part.split == "eval":  # the harnesses score the eval levels only
            yield part.file(xf["vlmevalkit_eval"]), consumers.vlmevalkit_tsv(rows, cfg)
            eval_parts.append((part, rows))
        del rows
    yield xf["vlmevalkit_circular"], consumers.vlmevalkit_tsv([m for _, rows in eval_parts for m in rows], cfg,
                                                              circular=True)
    for name, text in lmms.lmms_eval_files(eval_parts, cfg).items():
        yield f"{xf['lmms_eval_dir']}/{name}", text


def write_exports(release_dir: Path, eval_df: pl.DataFrame, sft_df: pl.DataFrame, cfg: dict,
                  checksums: bool = True) -> list[str]:
    """Write every export into the release folder (and re-write checksums.sha256); returns the files written. A text
    with a path or identity leak is not written, and the call raises once the others are (the release stage writes
    into a staging folder that a failed step discards)."""
    release_dir = Path(release_dir)
    tables = {"eval": eval_df, "sft": sft_df}
    xf = common.export_files(cfg)
    written, leaks = [], {}
    from pipeline.steps.exports import step_configs, visualprocessbench_texts  # (it imports pipeline.exports)

    configs = card.config_tables(tables, cfg) | step_configs(release_dir, cfg)  # + the T13 step track's
    card_text = card.card_markdown(tables, cfg, configs, common.recorded_warnings(release_dir, cfg))
    step_texts = visualprocessbench_texts(release_dir, cfg)
    for rel, text in chain(export_texts(tables, cfg), step_texts, [(xf["card"], card_text)]):
        if found := find_path_leaks(text) + facing.text_problems(rel, text, cfg):
            leaks[rel] = found
            continue
        io.atomic_write_text(release_dir / rel, text)
        written.append(rel)
    if leaks:
        raise ValueError(f"path or identity leaks (or columns a model may not see) in exports: {leaks}")
    for name, splits in configs.items():
        for rel, df in splits.values():
            if name in card.model_facing_configs(configs):
                facing.check_table(rel, df)
            io.write_parquet(release_dir / rel, df)
            written.append(rel)
    io.atomic_write_text(release_dir / xf["croissant"], common.dumps(croissant.croissant(tables, release_dir, cfg)))
    written.append(xf["croissant"])
    if checksums:
        writers.write_checksums(release_dir, cfg)
    return sorted(written)


def run_exports(cfg: dict, release_dir: Path, checksums: bool = True) -> list[str]:
    """Exports of the release already written in release_dir."""
    tables = common.read_tables(release_dir, cfg, levels=True)
    return write_exports(release_dir, tables["eval"], tables["sft"], cfg, checksums=checksums)
