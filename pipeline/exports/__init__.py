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


def made_exports(release_dir: Path, tables: dict[str, pl.DataFrame], cfg: dict):
    """Every export of the release in release_dir as (release-relative name, text or table, model-facing?), in
    writing order: the text exports, the step track's (T13), the card, the card's config tables, Croissant last (it
    hashes the files written before it). The one list the release step writes and the validator compares with; made
    lazily, one at a time, so the texts are never all held."""
    from pipeline.steps.exports import step_configs, visualprocessbench_texts  # (it imports pipeline.exports)

    xf = common.export_files(cfg)
    configs = card.config_tables(tables, cfg) | step_configs(release_dir, cfg)  # + the T13 step track's
    for rel, text in chain(export_texts(tables, cfg), visualprocessbench_texts(release_dir, cfg)):
        yield rel, text, True
    yield xf["card"], card.card_markdown(tables, cfg, configs, common.recorded_warnings(release_dir, cfg)), True
    facing_configs = card.model_facing_configs(configs)
    for name, splits in configs.items():
        for rel, df in splits.values():
            yield rel, df, name in facing_configs
    del configs
    yield xf["croissant"], common.dumps(croissant.croissant(tables, release_dir, cfg)), False


def write_exports(release_dir: Path, eval_df: pl.DataFrame, sft_df: pl.DataFrame, cfg: dict,
                  checksums: bool = True) -> list[str]:
    """Write every export into the release folder (and re-write checksums.sha256); returns the files written. A text
    with a path or identity leak is not written, and the call raises once the others are (the release stage writes
    into a staging folder that a failed step discards)."""
    release_dir = Path(release_dir)
    written, leaks = [], {}
    croissant_file = common.export_files(cfg)["croissant"]
    for rel, made, facing_file in made_exports(release_dir, {"eval": eval_df, "sft": sft_df}, cfg):
        if leaks and (isinstance(made, pl.DataFrame) or rel == croissant_file):
            break  # every text is checked by now: no table nor Croissant is written beside a leak
        if isinstance(made, pl.DataFrame):
            if facing_file:
                facing.check_table(rel, made)
            io.write_parquet(release_dir / rel, made)
        elif facing_file and (found := find_path_leaks(made) + facing.text_problems(rel, made, cfg)):
            leaks[rel] = found
            continue
        else:
            io.atomic_write_text(release_dir / rel, made)
        written.append(rel)
    if leaks:
        raise ValueError(f"path or identity leaks (or columns a model may not see) in exports: {leaks}")
    if checksums:
        writers.write_checksums(release_dir, cfg)
    return sorted(written)


def run_exports(cfg: dict, release_dir: Path, checksums: bool = True) -> list[str]:
    """Exports of the release already written in release_dir."""
    tables = common.read_tables(release_dir, cfg, levels=True)
    return write_exports(release_dir, tables["eval"], tables["sft"], cfg, checksums=checksums)
